# 2026-11-22, the code before 7e1ebbf: fp32 KDA with tf32x3 dot products instead of IEEE (experiment; sed on the device copy only)
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
python3 docs/benchmarks/scripts/fp32_stages.py > $OUT/stages_ieee.txt 2>&1; cat $OUT/stages_ieee.txt
sed -i 's/return "ieee" if dtype == torch.float32/return "tf32x3" if dtype == torch.float32/' triton_kda/chunk_fwd.py
sed -i 's/PREC == "ieee"/PREC != "tf32"/; s/prec == "ieee"/prec != "tf32"/' triton_kda/intra.py
git diff --stat > $OUT/diff.txt 2>&1; grep -n '"tf32x3"\|!= "tf32"' triton_kda/*.py >> $OUT/diff.txt
python3 docs/benchmarks/scripts/fp32_stages.py > $OUT/stages_tf32x3.txt 2>&1; cat $OUT/stages_tf32x3.txt
timeout 150 python3 -m benchmarks.run --suite fp32 --modes fwd,fwdbwd --impl triton --out $OUT/bench > $OUT/bench.log 2>&1; tail -12 $OUT/bench.log
( time timeout 300 python3 -m triton_kda.check.cli --full --filter fp32 --no-fla --jobs 8 --out $OUT/chk ) > $OUT/chk.log 2>&1; tail -30 $OUT/chk.log
