#!/bin/bash
# profile kube-apiserver during a gpuslice e2e_bench run (8 s, from 4 s after the pods start)
out=/tmp/prof/$1; rm -rf $out; mkdir -p $out
cd /work/main
KUBEBUILDER_ASSETS=/work/main/tools/kube/bin python3 benchmarks/e2e_bench.py --nodes 100 --pods ${PODS:-4000} --json $2 > $out/bench.json 2> $out/bench.err &
bench=$!
while ! pgrep -f "kube-scheduler --config" >/dev/null; do sleep 0.2; kill -0 $bench || exit 1; done
sleep 3
pid=$(pgrep -f "kube-apiserver" | head -1)
port=$(tr '\0' '\n' < /proc/$pid/cmdline | sed -n 's/--secure-port=//p')
kc=$(ls /tmp/e2e-bench-*/envtest/*kubeconfig* 2>/dev/null | tail -1)
python3 - "$port" "$out/api.pb" <<'PY' >> $out/log 2>&1
import sys, ssl, urllib.request, yaml, base64, tempfile, os, glob
port, dest = sys.argv[1], sys.argv[2]
kc = sorted(glob.glob("/tmp/e2e-bench-*/envtest/**/*kubeconfig*", recursive=True), key=os.path.getmtime)[-1]
cfg = yaml.safe_load(open(kc))
user = cfg["users"][0]["user"]; d = tempfile.mkdtemp()
def f(key, name):
    if key + "-data" in user:
        p = os.path.join(d, name); open(p, "wb").write(base64.b64decode(user[key + "-data"])); return p
    return user[key]
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
ctx.load_cert_chain(f("client-certificate", "c.crt"), f("client-key", "c.key"))
data = urllib.request.urlopen(f"https://127.0.0.1:{port}/debug/pprof/profile?seconds=8", context=ctx, timeout=40).read()
open(dest, "wb").write(data); print("saved", dest, len(data))
PY
wait
