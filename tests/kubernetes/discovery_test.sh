#!/bin/sh
# examples/kubernetes/edl-k8s-hosts against a stand-in kubectl (no cluster runs here): it must ask
# for the pods of its selector with the jsonpath it parses, list the Running pods without a
# deletionTimestamp as "pod:slots", and exit non-zero when kubectl fails (edl-run keeps its slots).
set -eu
script=${1:?usage: discovery_test.sh examples/kubernetes/edl-k8s-hosts}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# What `kubectl get pods -l edl.job=run7 -o jsonpath=...` prints: name, phase, deletionTimestamp.
cat > "$tmp/kubectl" <<'STUB'
#!/bin/sh
echo "$@" > "$KUBECTL_ARGS"
[ -n "${KUBECTL_FAIL:-}" ] && { echo "error: the server is unreachable" >&2; exit 1; }
printf '%s\n' "edl-workers-0-abcde Running " "edl-workers-1-fghij Running 2026-11-27T10:00:00Z" \
  "edl-workers-2-klmno Pending " "edl-workers-3-pqrst Running " "edl-workers-4-uvwxy Failed "
STUB
chmod +x "$tmp/kubectl"
export EDL_KUBECTL="$tmp/kubectl" KUBECTL_ARGS="$tmp/args" EDL_K8S_SELECTOR=edl.job=run7 EDL_SLOTS_PER_NODE=2
out=$("$script")
want=$(printf '%s\n' edl-workers-0-abcde:2 edl-workers-3-pqrst:2)
[ "$out" = "$want" ] || { echo "FAIL: printed '$out', expected '$want'"; exit 1; }
grep -q -- "get pods -l edl.job=run7 -o jsonpath=" "$tmp/args" || { echo "FAIL: kubectl called with: $(cat "$tmp/args")"; exit 1; }
if KUBECTL_FAIL=1 "$script" > /dev/null 2>&1; then echo "FAIL: exit 0 although kubectl failed"; exit 1; fi
if env -u EDL_K8S_SELECTOR "$script" > /dev/null 2>&1; then echo "FAIL: exit 0 without EDL_K8S_SELECTOR"; exit 1; fi
echo "edl-k8s-hosts: ok"
