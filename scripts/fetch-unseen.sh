#!/usr/bin/env bash
# Lays out the public transcripts of README "Validation on data nobody tuned on" in OUT, from their
# repositories at the commits measured, and checks that each source's files are the ones measured
# (a sha256 over the sorted per-file sha256 sums; exits non-zero, printing FAIL, on a mismatch).
# The data is other people's and is not copied into this repository: this script fetches it.
#
#   scripts/fetch-unseen.sh /tmp/unseen-data              # clones each repository (full history)
#   MUNINN_UNSEEN_GIT=DIR scripts/fetch-unseen.sh OUT     # reads DIR/<owner>+<name>/repo instead
#
# Files of 4 MiB and more are left out: the snapshots these figures were measured on lack them
# (11 of hannibal8856/claude_backup's 62 session files, 5 of LAF-US/IDAHO-VAULT's 124, 13 of
# awesumsawz/dotfiles-universal's 72).
set -euo pipefail
out="${1:?usage: fetch-unseen.sh OUT}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The git directory of owner/name: a local mirror, or a fresh bare clone.
repo() {
    local mirror="${MUNINN_UNSEEN_GIT:-}/${1/\//+}/repo"
    if [ -n "${MUNINN_UNSEEN_GIT:-}" ] && [ -d "$mirror" ]; then
        echo "$mirror"
    else
        local dir="$work/${1/\//+}.git"
        [ -d "$dir" ] || git clone --quiet --bare "https://github.com/$1" "$dir"
        echo "$dir"
    fi
}

# Every *.jsonl under PREFIX at COMMIT of REPO, written below DEST with PREFIX stripped.
tree() {
    local git; git="$(repo "$1")"
    git --git-dir="$git" ls-tree -r "$2" -- "$3" | while read -r _ _ sha path; do
        case "$path" in *.jsonl) ;; *) continue ;; esac
        mkdir -p -- "$4/$(dirname -- "${path#"$3"/}")"
        git --git-dir="$git" cat-file blob "$sha" >"$4/${path#"$3"/}" 2>/dev/null ||
            rm -f "$4/${path#"$3"/}"
    done
}

# One file of REPO at COMMIT, written below DEST with PREFIX stripped.
file() {
    local git; git="$(repo "$1")"
    mkdir -p -- "$4/$(dirname -- "${3#"$5"/}")"
    git --git-dir="$git" show "$2:$3" >"$4/${3#"$5"/}"
}

tree hannibal8856/claude_backup 2e35e2520a2d1ec40b13fb931c06981bc7bb7453 .claude/projects \
    "$out/claude-code/claude-backup"
tree LAF-US/IDAHO-VAULT c1c3fe9b6f274081e0ffbb32e541a9bf32f08892 .claude/projects \
    "$out/claude-code/idaho-vault"
# Found after the two above were tuned on (README "A third and fourth user"): nobody tuned on them.
tree JamesTiberiusKirk/dotsv2 c4267e011b9fefb19bcf4f50e7a3e1281b354495 .claude/projects \
    "$out/claude-code/dotsv2"
tree 4thehalibit/omarchy-backup 41bb7a1ab482a67e4302082008caaff403d36544 .claude/projects \
    "$out/claude-code/omarchy"
tree awesumsawz/dotfiles-universal 49d63c930ee4cdc8db5a394fd579dbe108fae8e0 .claude/projects \
    "$out/claude-code/dotfiles-universal"

# Codex rollouts: each file at the commit holding its longest version.
s=.codex/sessions
for f in 2025/11/12/rollout-2025-11-12T17-48-11-019a7ae6-1945-7c63-98f2-210adb922af9.jsonl \
    2025/11/13/rollout-2025-11-13T16-00-16-019a7fa9-a846-7393-8d7a-9997d08b0096.jsonl \
    2025/11/13/rollout-2025-11-13T18-21-11-019a802a-aab1-7c31-9831-d2510c7a74a2.jsonl; do
    file MoonLadderStudios/MoonMind 786ef1a51cec0d27635ee1d3e8b7114da78ed4da "$s/$f" "$out/codex/moonmind" $s
done
while read -r commit f; do
    file Ogekuri/G "$commit" "$s/$f" "$out/codex/ogekuri" $s
done <<'EOF'
295bd0266c2cc3cf28a365371055a8cb7d75dc1c 2025/12/15/rollout-2025-12-15T09-11-50-019b2110-d896-7e90-8b58-5e15681c467f.jsonl
295bd0266c2cc3cf28a365371055a8cb7d75dc1c 2025/12/15/rollout-2025-12-15T09-15-54-019b2114-8f1f-7e53-9510-172d028728b4.jsonl
295bd0266c2cc3cf28a365371055a8cb7d75dc1c 2025/12/15/rollout-2025-12-15T14-05-30-019b221d-b310-7143-9b06-d60f82aef7f2.jsonl
295bd0266c2cc3cf28a365371055a8cb7d75dc1c 2025/12/15/rollout-2025-12-15T14-33-38-019b2237-7485-7303-aad4-157c495be549.jsonl
5701c92a2161015351229c1948ea4302f7404cc9 2025/12/15/rollout-2025-12-15T15-11-17-019b2259-ee39-7c11-b613-5d32c161f9c9.jsonl
5701c92a2161015351229c1948ea4302f7404cc9 2025/12/15/rollout-2025-12-15T16-09-01-019b228e-c910-7c60-aa02-950574d79541.jsonl
5701c92a2161015351229c1948ea4302f7404cc9 2025/12/15/rollout-2025-12-15T16-40-06-019b22ab-3eb0-7891-8ce9-b00238a6a671.jsonl
364a8a1fc2a60c833dc19015c1cd22b2f046ba4d 2025/12/16/rollout-2025-12-16T14-44-50-019b2768-1075-7620-b75a-4f11d3b4aa31.jsonl
364a8a1fc2a60c833dc19015c1cd22b2f046ba4d 2025/12/17/rollout-2025-12-17T09-50-39-019b2b81-1882-7b50-ae4a-d08364187e5a.jsonl
364a8a1fc2a60c833dc19015c1cd22b2f046ba4d 2025/12/17/rollout-2025-12-17T10-08-08-019b2b91-1b8c-7882-9e73-18bc533c1986.jsonl
EOF
for f in 2025/12/25/rollout-2025-12-25T22-45-23-019b55c1-d022-7061-bbb9-b0c90708472b.jsonl \
    2025/12/26/rollout-2025-12-26T01-48-36-019b5669-8da8-7bc3-bed8-e1c1b805dad5.jsonl; do
    file 0h-n0/local-voice-assistant-codex 004983e110a9ede1fbaa1d6d3f84e1c14afea302 "$s/$f" "$out/codex/voice" $s
done

find "$out" -name '*.jsonl' -size +4095k -delete

status=0
while read -r want dir; do
    got="$(cd "$out/$dir" && find . -name '*.jsonl' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
    files="$(find "$out/$dir" -name '*.jsonl' | wc -l)"
    if [ "$got" = "$want" ]; then
        echo "ok   $dir ($files files)"
    else
        echo "FAIL $dir: $got, measured $want ($files files)"
        status=1
    fi
done <<'EOF'
5f3567c7ee8984d3 claude-code/claude-backup
d3f830542c5f5a95 claude-code/idaho-vault
70606bdf616377f2 claude-code/dotsv2
5991bac17c7f46f6 claude-code/omarchy
2a7d4af761905843 claude-code/dotfiles-universal
d848e505a791bc5f codex/moonmind
72f4b9439d0a82fc codex/ogekuri
fda7604bcbef9301 codex/voice
EOF
exit $status
