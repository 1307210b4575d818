"""Print the outcome of each test a JUnit report holds whose module and name match, one line each, and
exit 1 unless at least one matched and all of them passed.

    named_tests.py REPORT.xml MODULE_REGEX NAME_REGEX
"""

import re
import sys
import xml.etree.ElementTree as ET


def main(report: str, module: str, name: str) -> int:
    cases = [c for c in ET.parse(report).iter("testcase")
             if re.search(module, c.get("classname", "")) and re.search(name, c.get("name", ""))]
    failed = 0
    for case in cases:
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        failed += outcome != "passed"
        print(f"{outcome.upper():8} {case.get('classname')}::{case.get('name')}")
    print(f"{len(cases) - failed} of {len(cases)} passed")
    return 0 if cases and not failed else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
