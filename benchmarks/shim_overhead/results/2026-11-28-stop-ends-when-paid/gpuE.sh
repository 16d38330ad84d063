# 2x H100, call E: 2 ranks at 30 %, traced, alternating the library before this session (972444a,
# the whole tree) and b271cd7 (the paid stop ends): do the long holds at DDP's first broadcast differ?
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
cp -r .whl .before-prog/basetree/ 2>/dev/null
for i in 1 2; do
  for who in base new; do
    dir=$PWD; [[ $who == base ]] && dir=$PWD/.before-prog/basetree
    ( cd $dir && TRACE=1 COMPUTE_PHASE=1 SM_LIMIT=30 ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=120 \
      PHASES="nccl" NPROC=2 bash benchmarks/multi_gpu/run.sh /tmp/e-$who-$i > /tmp/e-$who-$i.log 2>&1 )
    echo "$who $i rc=$?: $(grep -E 'caps\+compute-30 \(2 ranks\)' /tmp/e-$who-$i/summary.md)"
    sed -n '/^# Trace of/,/^## Held, by/p' /tmp/e-$who-$i/traces.md | sed -n '/Longest holds/,/^## Held, by/p' | sed -n 3,8p | cut -d'|' -f2-8,10,11
    sed -n '/^# Trace of/,/^## Collectives/p' /tmp/e-$who-$i/traces.md | grep -E "^\| [0-9]+ \| \[[0-9]" | cut -d'|' -f2-9
  done
done | tee $OUT/e-2ranks-30.txt
