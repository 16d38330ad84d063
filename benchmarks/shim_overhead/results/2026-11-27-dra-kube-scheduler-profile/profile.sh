#!/bin/bash
# profile the longest-lived kube-scheduler (and kube-apiserver meanwhile) of a dra_e2e run
out=/tmp/prof; rm -rf $out; mkdir -p $out
cd /work/main
KUBEBUILDER_ASSETS=/work/main/tools/kube/bin python3 benchmarks/dra_e2e.py --dialects --nodes 100 --gpus 8 --pods 2000 --timeout 120 --json > $out/bench.json 2> $out/bench.err &
bench=$!
seen=""
while kill -0 $bench 2>/dev/null; do
  for pid in $(pgrep -f "kube-scheduler --config"); do
    case " $seen " in *" $pid "*) continue;; esac
    seen="$seen $pid"
    port=$(tr '\0' '\n' < /proc/$pid/cmdline | sed -n 's/--secure-port=//p')
    kc=$(tr '\0' '\n' < /proc/$pid/cmdline | sed -n 's/--kubeconfig=//p')
    echo "scheduler $pid port $port kc $kc" >> $out/log
    (sleep 3; python3 - "$kc" "$port" "$out/sched-$pid.pb" <<'PY' >> $out/log 2>&1
import sys, ssl, urllib.request, yaml, base64, tempfile, os
kc, port, dest = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = yaml.safe_load(open(kc))
user = cfg["users"][0]["user"]; d = tempfile.mkdtemp()
def f(key, name):
    if key + "-data" in user:
        p = os.path.join(d, name); open(p, "wb").write(base64.b64decode(user[key + "-data"])); return p
    return user[key]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.load_cert_chain(f("client-certificate", "c.crt"), f("client-key", "c.key"))
try:
    data = urllib.request.urlopen(f"https://127.0.0.1:{port}/debug/pprof/profile?seconds=15", context=ctx, timeout=40).read()
    open(dest, "wb").write(data); print("saved", dest, len(data))
except Exception as e:
    print("profile failed", port, e)
PY
    ) &
  done
  sleep 0.2
done
wait
echo done >> $out/log
