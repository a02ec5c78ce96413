"""The package's comments say why, not when: no reference to this project's issue tracker,
which a reader of the repository cannot open (history belongs in git)."""
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# "issue 41", "issues 30 and 41", "issue #12", "the issue's run": the tracker's words.
ISSUE_REFERENCE = re.compile(r"\bissues? #?\d+|\bthe issue's\b", re.IGNORECASE)


def _package_sources():
  for top in ("scalable_agent_tf2", "dynamic_batching"):
    for folder, _, names in os.walk(os.path.join(REPO, top)):
      for name in names:
        if name.endswith((".py", ".cc")):
          yield os.path.join(folder, name)
  yield os.path.join(REPO, "experiment.py")


def test_the_package_names_no_issue_of_the_tracker():
  found = []
  for path in _package_sources():
    with open(path, encoding="utf-8") as f:
      for number, line in enumerate(f, 1):
        if ISSUE_REFERENCE.search(line):
          found.append(f"{os.path.relpath(path, REPO)}:{number}: {line.strip()}")
  assert found == [], "\n".join(found)
