"""Where the main suite's wall time went, from its JUnit XML (pytest --junitxml).

Usage: python .ci/suite_times.py JUNIT_XML [--top N]

Prints the seconds per test directory (tests/<dir>) and the N slowest modules,
each with its test count; a test's time is its setup, call and teardown
(pytest's default junit_duration_report), so a module's cluster fixture counts
in its first test. Exit code 2 when the file is missing or not JUnit XML.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit_xml")
    parser.add_argument("--top", type=int, default=15, help="modules to list (default 15)")
    args = parser.parse_args()
    try:
        root = ET.parse(args.junit_xml).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"suite_times: cannot read {args.junit_xml}: {exc}", file=sys.stderr)
        return 2
    seconds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for case in root.iter("testcase"):
        module = case.get("classname", "?").split("::")[0]
        # importlib mode names a test by its dotted path, with any class after the module
        parts = module.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        module = ".".join(parts) or case.get("classname", "?")
        seconds[module] += float(case.get("time", 0.0))
        counts[module] += 1
    by_dir: Counter[str] = Counter()
    dir_counts: Counter[str] = Counter()
    for module, s in seconds.items():
        directory = ".".join(module.split(".")[:2])
        by_dir[directory] += s
        dir_counts[directory] += counts[module]
    total = sum(seconds.values())
    print(f"main suite: {total:.0f} s in {sum(counts.values())} tests; per directory:")
    for directory, s in by_dir.most_common():
        print(f"  {s:7.1f} s  {dir_counts[directory]:5d} tests  {directory}")
    print(f"the {args.top} slowest modules:")
    for module, s in seconds.most_common(args.top):
        print(f"  {s:7.1f} s  {counts[module]:5d} tests  {module}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
