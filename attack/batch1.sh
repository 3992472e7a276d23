T="--max-train-samples 100 --max-len 40 --epochs 1"
bash run1.sh base_trainer --data-file data/data300.csv --max-train-samples 200 --max-len 48 --epochs 1 --runner trainer
bash run1.sh seed_again --data-file data/data300.csv --max-train-samples 200 --max-len 48 --epochs 1
bash run1.sh bs1 --data-file data/data300.csv --max-train-samples 30 --max-len 32 --epochs 1 --batch-size 1
bash run1.sh bs1_tr --data-file data/data300.csv --max-train-samples 30 --max-len 32 --epochs 1 --batch-size 1 --runner trainer
bash run1.sh bsbig --data-file data/data300.csv --max-train-samples 50 --max-len 32 --epochs 1 --batch-size 500
bash run1.sh bsbig_tr --data-file data/data300.csv --max-train-samples 50 --max-len 32 --epochs 1 --batch-size 500 --runner trainer
bash run1.sh ep3 --data-file data/data300.csv --max-train-samples 100 --max-len 32 --epochs 3
bash run1.sh ep3_tr --data-file data/data300.csv --max-train-samples 100 --max-len 32 --epochs 3 --runner trainer
bash run1.sh ml12 --data-file data/data300.csv --max-train-samples 100 --max-len 12 --epochs 1
bash run1.sh ml12_tr --data-file data/data300.csv --max-train-samples 100 --max-len 12 --epochs 1 --runner trainer
for f in tiny5 two_rows long onechar english oneclass empty_review tiny20; do bash run1.sh f_$f --data-file data/$f.csv $T; done
bash run1.sh f_tiny5_tr --data-file data/tiny5.csv $T --runner trainer
bash run1.sh f_two_rows_tr --data-file data/two_rows.csv $T --runner trainer
