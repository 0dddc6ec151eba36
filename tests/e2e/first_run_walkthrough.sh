#!/usr/bin/env bash
# Runs every command of docs/first-run.md against the sshd test hosts, so the page cannot rot.
#
# usage: first_run_walkthrough.sh HVDRUN TRAIN_FASHION_MNIST PAGE SSHD_DIR
#
# A step of the page is an HTML comment followed by a ```sh block:
#     <!-- walkthrough: exit 0, prints "some text" -->
#     ```sh
#     hvdrun --check-ssh -H HOST1,HOST2 -p PORT
#     ```
# The block runs with bash in a scratch folder after HOST1, HOST2 and PORT are replaced by the
# first two test hosts and their port (in the expected text too), as one `bash -e` script (a
# failing command ends the step); it must exit with the given code and print a line containing
# the text (stdout or stderr). Every ```sh block of the page must be a step, and the page must
# have the steps a first run needs (ssh, --check-ssh, --check-net, the training job).
# The page's commands call `hvdrun`, `ssh` and `train_fashion_mnist` by name: here `hvdrun` and
# `ssh` are wrappers that add the test hosts' ssh config and known_hosts (--ssh-config,
# --ssh-known-hosts, ssh -F), which real hosts read from ~/.ssh instead.
set -euo pipefail

if [ $# -ne 4 ]; then
    echo "usage: $0 HVDRUN TRAIN_FASHION_MNIST PAGE SSHD_DIR" >&2
    exit 2
fi
hvdrun=$(realpath "$1") train=$(realpath "$2") page=$3 sshd_dir=$4
set -a
# shellcheck disable=SC1091
. "$sshd_dir/hosts.env"
set +a
IFS=, read -r host1 host2 _ <<<"$HVDTEST_SSH_ADDRS"
port=$HVDTEST_SSH_PORT

work=$(mktemp -d "${TMPDIR:-/tmp}/hvd-first-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
cat >"$work/bin/hvdrun" <<EOF
#!/bin/sh
exec '$hvdrun' --ssh-config '$HVDTEST_SSH_CONFIG' --ssh-known-hosts '$HVDTEST_SSH_KNOWN_HOSTS' "\$@"
EOF
cat >"$work/bin/ssh" <<EOF
#!/bin/sh
exec /usr/bin/ssh -F '$HVDTEST_SSH_CONFIG' "\$@"
EOF
chmod +x "$work/bin/hvdrun" "$work/bin/ssh"
# As the page's set-up leaves it: hvdrun and the example on PATH (hvdrun forwards PATH to ranks).
PATH="$work/bin:$(dirname "$hvdrun"):$(dirname "$train"):$PATH"
export PATH

substitute() {
    sed -e "s/\bHOST1\b/$host1/g" -e "s/\bHOST2\b/$host2/g" -e "s/\bPORT\b/$port/g"
}

# Split the page into steps: step.N.sh (the block), step.N.exit, step.N.expect.
marker='^<!-- walkthrough: exit ([0-9]+), prints "(.*)" -->$'
n=0 state=text fail=0
while IFS= read -r line || [ -n "$line" ]; do
    case $state in
    text)
        if [[ $line =~ $marker ]]; then
            n=$((n + 1))
            echo "${BASH_REMATCH[1]}" >"$work/step.$n.exit"
            printf '%s\n' "${BASH_REMATCH[2]}" | substitute >"$work/step.$n.expect"
            : >"$work/step.$n.sh"
            state=marked
        elif [[ $line == '```sh'* ]]; then
            echo "FAIL: $page: a \`\`\`sh block without a walkthrough marker before it:" \
                "every command block of the page must be run here" >&2
            fail=1
            state=unmarked
        fi
        ;;
    marked)
        if [[ $line == '```sh' ]]; then
            state=block
        else
            echo "FAIL: $page: step $n: the marker must be followed by a \`\`\`sh line" >&2
            exit 1
        fi
        ;;
    block | unmarked)
        if [[ $line == '```' ]]; then
            state=text
        elif [ $state = block ]; then
            printf '%s\n' "$line" | substitute >>"$work/step.$n.sh"
        fi
        ;;
    esac
done <"$page"
[ $fail -eq 0 ] || exit 1

# The steps a first run needs must be in the page (a deleted step must not pass silently).
for needed in 'ssh ' 'hvdrun --check-ssh' 'hvdrun --check-net' \
    'hvdrun -np 2 .*train_fashion_mnist'; do
    if ! grep -q -- "$needed" "$work"/step.*.sh 2>/dev/null; then
        echo "FAIL: $page: no step runs '$needed'" >&2
        exit 1
    fi
done

cd "$work"
for i in $(seq 1 "$n"); do
    want_rc=$(cat "step.$i.exit") expect=$(cat "step.$i.expect")
    echo "=== step $i: $(cat "step.$i.sh")"
    start=$(date +%s%N)
    set +e
    timeout 120 bash -e -o pipefail "step.$i.sh" >"step.$i.out" 2>&1
    rc=$?
    set -e
    cat "step.$i.out"
    echo "=== step $i: exit $rc after $((($(date +%s%N) - start) / 1000000)) ms"
    if [ "$rc" -ne "$want_rc" ]; then
        echo "FAIL: step $i exited $rc; the page says $want_rc" >&2
        fail=1
    elif ! grep -q -F -- "$expect" "step.$i.out"; then
        echo "FAIL: step $i printed no line containing: $expect" >&2
        fail=1
    fi
done
[ $fail -eq 0 ] || exit 1
echo "all $n steps of $page passed"
