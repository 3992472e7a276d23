# cache reuse in one dir
bash run1.sh cache --data-file data/data300.csv --max-train-samples 100 --max-len 32 --epochs 1 --modes dynamic
bash run1.sh cache --data-file data/data300.csv --max-train-samples 100 --max-len 32 --epochs 1 --modes dynamic
cp -r /tmp/atk/cache/results.json /tmp/atk/cache_run2.json
bash run1.sh cache --data-file data/data300.csv --max-train-samples 100 --max-len 24 --epochs 1 --modes dynamic
bash run1.sh cache --data-file data/data300.csv --max-train-samples 100 --max-len 32 --epochs 1 --modes dynamic --batch-size 8
bash run1.sh cache --data-file data/data300_b.csv --max-train-samples 100 --max-len 32 --epochs 1 --modes dynamic
ls /tmp/atk/cache
grep -h "memory cost from\|calibrated in" /tmp/atk/cache.out
# trainer memory: batch = N
bash run1.sh tr_bsN --data-file data/data300.csv --max-train-samples 48 --max-len 48 --epochs 1 --batch-size 48 --runner trainer
bash run1.sh lp_bsN --data-file data/data300.csv --max-train-samples 48 --max-len 48 --epochs 1 --batch-size 48
