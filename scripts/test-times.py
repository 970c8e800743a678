"""The slowest tests of a nextest run, from its JUnit file: printed after
`make test` (and so kept in CI's log), with the count and the sum.

usage: python3 scripts/test-times.py target/nextest/default/junit.xml [N]
"""
import sys
import xml.etree.ElementTree as ET


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"test-times: cannot read {path}: {e}", file=sys.stderr)
        return 0
    cases = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            cases.append((float(case.get("time", "0")), suite.get("name", ""), case.get("name", ""), failed))
    cases.sort(reverse=True)
    total = sum(c[0] for c in cases)
    print(f"\nmake test: {len(cases)} tests, {total:.0f} s of test time; the {min(top, len(cases))} slowest:")
    for t, binary, name, failed in cases[:top]:
        print(f"  {t:8.1f} s  {binary} {name}{'  FAILED' if failed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
