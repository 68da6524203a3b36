#!/usr/bin/env python
"""Run a command and fail if it changed any file under the given paths: nbdev's CI checks, that also work on a dirty tree.

    python tools/check_unchanged.py MESSAGE PATHSPEC... -- COMMAND...

The files are those git sees (tracked, or untracked and not ignored) under the pathspecs, before and after the command,
compared by content: so it checks "the command changes nothing", whether or not the tree matches HEAD (in CI, on a fresh
clone, it is the same as checking `git status`). Outside a git work tree it only runs the command.
"""
import hashlib, subprocess, sys
from pathlib import Path


def snapshot(pathspecs):
    "{path: sha1 of its content, or None if it is gone} for the files git sees under `pathspecs`."
    out = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard', '--', *pathspecs],
                         check=True, capture_output=True).stdout
    res = {}
    for p in filter(None, out.decode().split('\0')):
        f = Path(p)
        res[p] = hashlib.sha1(f.read_bytes()).hexdigest() if f.is_file() else None
    return res


def main(argv):
    if '--' not in argv or argv.index('--') < 2 or argv.index('--') == len(argv) - 1: sys.exit(__doc__)
    i = argv.index('--')
    msg, pathspecs, cmd = argv[0], argv[1:i], argv[i + 1:]
    in_git = subprocess.run(['git', 'rev-parse', '--is-inside-work-tree'], capture_output=True).returncode == 0
    if not in_git: print('check_unchanged: not in a git work tree, not checking', file=sys.stderr)
    before = snapshot(pathspecs) if in_git else {}
    rc = subprocess.run(cmd).returncode
    if rc: sys.exit(rc)
    if not in_git: return
    after = snapshot(pathspecs)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p, 'absent') != after.get(p, 'absent'))
    if changed:
        print(f'\n{msg}\n`{" ".join(cmd)}` changed:', *[f'  {p}' for p in changed], sep='\n', file=sys.stderr)
        subprocess.run(['git', '--no-pager', 'diff', '--stat', '--', *changed])
        sys.exit(1)


if __name__ == '__main__': main(sys.argv[1:])
