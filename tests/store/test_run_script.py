"""``run_script``: the commit's EVALSHA, on a real Redis and a real Redis Cluster."""

from __future__ import annotations

from svit_cluster.store._redis import RedisClient, run_script

ECHO = "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])"


def test_a_preloaded_script_runs_by_its_sha_and_a_flushed_one_is_loaded_again(
    rclient: RedisClient,
) -> None:
    script = rclient.register_script(ECHO)
    key = "{svit-test}run-script"
    assert run_script(rclient, script, [key], ["one"]) == b"one"
    # a restarted (or failed-over) server has no scripts: NOSCRIPT, load, run once more
    rclient.script_flush()
    assert run_script(rclient, script, [key], ["two"]) == b"two"
    assert rclient.get(key) == b"two"
