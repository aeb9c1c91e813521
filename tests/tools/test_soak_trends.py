"""benchmarks.bench_soak: how a trend judges growth around host kills (pure:
hand-made per-minute rows, no cluster)."""

from __future__ import annotations

import random
from typing import Any

from benchmarks.bench_soak import (
    FAILOVER_SETTLE_S,
    Tally,
    failover_windows,
    fit,
    history_trend,
    trends,
)


def rows(p99: list[float], pss: list[float] | None = None) -> list[dict[str, Any]]:
    """One row per minute (window ``[m-1, m)`` minutes), flat sizes."""
    out = []
    for i, value in enumerate(p99):
        t = 60.0 * (i + 1)
        out.append({"minute": i + 1, "from_s": t - 60, "t_s": t,
                    "activation_p50_ms": 20.0, "activation_p99_ms": value, "turns": 900,
                    "redis_used_memory_mib": 22.0,
                    "host_pss_mib": {"h1": (pss or [1500.0] * len(p99))[i]}})
    return out


#: A kill at minute 16.5, restarted 30 s later: its window reaches 17 min + settle.
KILL = {"host": "h1", "t_s": 16.5 * 60, "restarted_in_s": 30.0}


#: p99 per minute: flat, then the four minutes a kill at 16.5 min disturbs.
FAILOVER_RAMP = [60.0] * 16 + [5_000.0, 10_000.0, 20_000.0, 30_000.0]


def test_a_latency_ramp_inside_a_kill_window_is_not_growth() -> None:
    p99 = list(FAILOVER_RAMP)
    out = trends(rows(p99), [KILL])["activation_p99_ms"]
    assert out["grows"] is False and out["flat"] is True
    # the rows of minutes 17..20 overlap [16.5 min, 17 min + FAILOVER_SETTLE_S]
    assert out["left_out"] == 4


def test_the_same_ramp_with_no_kill_grows() -> None:
    """Negative control: the window rule, not the noise rule, leaves it out."""
    out = trends(rows(list(FAILOVER_RAMP)), [])["activation_p99_ms"]
    assert out["grows"] is True and out["left_out"] == 0


def test_noise_around_a_level_is_flat_and_a_steady_rise_grows() -> None:
    rng = random.Random(7)
    noisy = [2_000.0 * (1 + rng.uniform(-0.5, 0.5)) for _ in range(20)]
    out = trends(rows(noisy), [])["activation_p99_ms"]
    assert out["flat"] is True and out["grows"] is False
    assert out["moved_share"] is not None and out["slope_se"] is not None
    rising = [v + 40.0 * i for i, v in enumerate(noisy)]  # +2 % of the level a minute
    out = trends(rows(rising), [])["activation_p99_ms"]
    assert out["grows"] is True and out["flat"] is False


def test_a_short_or_single_minute_window_has_no_verdict() -> None:
    assert fit([(1.0, 5.0)]) == (None, None)
    assert fit([(1.0, 5.0), (1.0, 6.0)]) == (None, None)
    s, se = fit([(1.0, 5.0), (2.0, 6.0)])
    assert s == 1.0 and se is None


def test_growth_outside_the_kill_windows_still_grows() -> None:
    p99 = [60.0 + 10.0 * i for i in range(20)]  # +10 ms a minute, every minute
    out = trends(rows(p99), [KILL])["activation_p99_ms"]
    assert out["grows"] is True
    assert out["points"] + out["left_out"] == 10


def test_sizes_keep_every_sample_and_a_killed_hosts_memory_its_own_window() -> None:
    pss = [1500.0] * 20
    pss[16] = pss[17] = 200.0  # the new node, still warming up
    out = trends(rows([60.0] * 20, pss), [KILL])
    assert out["redis_used_memory_mib"]["left_out"] == 0
    assert out["host_pss_mib.h1"]["flat"] is True
    assert out["host_pss_mib.h1"]["left_out"] >= 2


def test_failover_windows_report_each_kill_on_its_own() -> None:
    tally = Tally()
    tally.kills = [KILL]
    tally.activations = [(10.0, 0.02), (KILL["t_s"] + 5, 12.0), (KILL["t_s"] + 40, 0.03),
                         (KILL["t_s"] + 30 + FAILOVER_SETTLE_S + 1, 0.02)]
    tally.turns = [KILL["t_s"] + 1.0] * 3
    (window,) = failover_windows(tally)
    assert window["host"] == "h1" and window["activations"] == 2
    assert window["max_ms"] == 12000.0
    assert window["turns_per_min"] > 0


def history_rows(sizes: list[float], per_minute: int = 1000) -> list[dict[str, Any]]:
    return [{"activations": per_minute, "sender_keys_kib": v} for v in sizes]


def test_a_sawtooth_key_size_is_flat_against_the_senders_history() -> None:
    saw = [620.0, 700.0, 735.0, 640.0, 690.0, 730.0, 625.0, 715.0] * 3
    out = history_trend(history_rows(saw))
    assert out["flat"] is True and out["grows"] is False
    assert out["from_commit"] >= 12_000 and out["to_commit"] == 24_000
    assert (out["min"], out["max"]) == (620.0, 735.0)


def test_a_key_size_that_grows_with_commits_grows() -> None:
    """Negative control: +10 KiB per 1 000 commits, the outbox-in-state kind."""
    out = history_trend(history_rows([600.0 + 10.0 * i for i in range(24)]))
    assert out["grows"] is True
    assert out["slope_per_10k_commits"] == 100.0
