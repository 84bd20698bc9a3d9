#!/usr/bin/env bash
# bash experiments/gpu/travel_light.sh on|off   (around device calls that must carry big files, e.g. the SmolLM2 wheel)
#
# A device call sends the tree (tracked and untracked-not-ignored files) and its carried paths, 64 MiB in all, counted
# in disk blocks. Experiments' results are most of the tree (55 of 58 MB on 2026-11-27), and a device needs none of
# them, nor tests/. `on` takes them out of git's index and ignores them through .git/info/exclude, so a call sends
# ~3 MB of tree; the files stay on disk. `off` puts the index and the exclude file back. Commit nothing in between:
# such a commit would delete them.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
EXCLUDE=.git/info/exclude
MARK="# travel_light.sh"
case ${1:-} in
    on)
        if grep -qF "$MARK" "$EXCLUDE" 2>/dev/null; then echo "already on" && exit 0; fi
        git rm -r -q --cached experiments/*/results tests
        printf '%s\n/experiments/*/results/\n/tests/\n' "$MARK" >>"$EXCLUDE"
        echo "on: $(git ls-files | wc -l) files tracked in the index for the call; run '$0 off' after the calls" ;;
    off)
        git reset -q -- experiments tests
        grep -vxF -e "$MARK" -e '/experiments/*/results/' -e '/tests/' "$EXCLUDE" >"$EXCLUDE.tmp" || true
        mv "$EXCLUDE.tmp" "$EXCLUDE"
        git status --short | head -5
        echo "off" ;;
    *) echo "usage: $0 on|off" >&2 && exit 2 ;;
esac
