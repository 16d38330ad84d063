# 2x H100, call F: 2 ranks at 30 %, untraced, alternating the library before this session (972444a,
# the whole tree) and b271cd7 (the paid stop ends): do the long holds at DDP's first broadcast differ?
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
cp -r .whl .before-prog/basetree/ 2>/dev/null
for i in 1 2; do
  for who in base new; do
    dir=$PWD; [[ $who == base ]] && dir=$PWD/.before-prog/basetree
    ( cd $dir && COMPUTE_PHASE=1 SM_LIMIT=30 ROUND_LIMIT=70 NCCL_ROUNDS="plain compute" BUDGET=120 \
      PHASES="nccl" NPROC=2 bash benchmarks/multi_gpu/run.sh /tmp/e-$who-$i > /tmp/e-$who-$i.log 2>&1 )
    echo "$who $i rc=$?: $(grep -E 'caps\+compute-30 \(2 ranks\)' /tmp/e-$who-$i/summary.md)"
  done
done | tee $OUT/f-2ranks-30.txt
