"""``svit-chaos check`` on saved fixtures (offline), and ``run`` argument handling."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from svit_chaos.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def test_check_passes_the_fenced_fixture_and_fails_the_unfenced_one() -> None:
    cli = CliRunner()
    ok = cli.invoke(main, ["check", str(FIXTURES / "fenced-paused-owner")])
    assert ok.exit_code == 0, ok.output
    bad = cli.invoke(main, ["check", str(FIXTURES / "unfenced-paused-owner" / "history.jsonl"),
                            "--json"])
    assert bad.exit_code == 1
    doc = json.loads(bad.stdout)
    assert doc["verdict"] == "fail"
    assert {a["invariant"] for a in doc["anomalies"]} == {"tokens"}
    lines = {line for a in doc["anomalies"] for line in a["lines"]}
    assert lines  # anomalies point at history lines


def test_check_prints_the_availability_tables_unwrapped() -> None:
    res = CliRunner().invoke(main, ["check", str(FIXTURES / "fenced-paused-owner")])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "| process | availability | demand_s | unavailable_s | outages | longest_gap_s | " \
           "longest_gap_at | commits |" in lines
    assert "| kind | count | p50 | p90 | max | unrecovered |" in lines
    assert any(line.startswith("| svit://chaos/") and line.endswith(" |") for line in lines)
    assert any(line.startswith("### Failover per fault kind") for line in lines)


def test_check_saves_a_fixture_and_rejects_bad_input(tmp_path: Path) -> None:
    cli = CliRunner()
    saved = tmp_path / "fixture"
    res = cli.invoke(main, ["check", str(FIXTURES / "unfenced-paused-owner"),
                            "--save-fixture", str(saved)])
    assert res.exit_code == 1
    assert (saved / "history.jsonl").exists() and (saved / "logs.jsonl").exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "history.jsonl").write_text("nonsense\n{}\n")
    (broken / "logs.jsonl").write_text("")
    res = cli.invoke(main, ["check", str(broken)])
    assert res.exit_code == 2 and "not JSON" in res.output
    res = cli.invoke(main, ["check", str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2


def test_run_refuses_unknown_scenarios_and_bad_shapes() -> None:
    cli = CliRunner()
    assert cli.invoke(main, ["run", "--scenario", "nope"]).exit_code == 2
    assert cli.invoke(main, ["run", "--hosts", "0"]).exit_code == 2
    # scenarios that cannot run are refused before anything starts
    short = cli.invoke(main, ["run", "--scenario", "smoke", "--duration", "10"])
    assert short.exit_code == 2 and "needs a duration of at least" in short.output
    lonely = cli.invoke(main, ["run", "--scenario", "kill-host", "--hosts", "1",
                               "--duration", "60"])
    assert lonely.exit_code == 2 and "2 hosts" in lonely.output
    help_text = cli.invoke(main, ["run", "--help"]).output
    for option in ("--scenario", "--duration", "--seed", "--hosts", "--clients", "--processes",
                   "--out", "--negative-control"):
        assert option in help_text


def test_run_options_default_to_run_config() -> None:
    """``svit-chaos run``'s defaults are :class:`RunConfig`'s, written once there
    (``--scenario`` has none: it follows ``--topology``)."""
    import dataclasses

    import click
    from svit_chaos.run import RunConfig

    run = main.commands["run"] if isinstance(main, click.Group) else None
    assert run is not None
    fields = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    checked = 0
    for param in run.params:
        if param.name in fields and param.name != "scenario" and fields[param.name] is not None:
            assert param.default == fields[param.name], param.name
            checked += 1
    assert checked >= 10, checked
