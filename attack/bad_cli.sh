PY="/work/main/.venv/bin/python"; export PYTHONPATH=/work/wt-attack2/src
D=data/data300.csv
run() { echo "### $*"; timeout 120 $PY ../examples/sft_causal_lm.py "$@" >/tmp/atk_out 2>/tmp/atk_err; echo "rc=$? stderr_lines=$(grep -c . /tmp/atk_err)"; grep -v -i warn /tmp/atk_err | tail -3; }
run --data-file /nonexistent.csv --output-dir /tmp/atk/o1
run --data-file /tmp --output-dir /tmp/atk/o1
run --data-file $D --epochs 0 --output-dir /tmp/atk/o1
run --data-file $D --batch-size -1 --output-dir /tmp/atk/o1
run --data-file $D --max-len 0 --output-dir /tmp/atk/o1
run --data-file $D --max-len 11 --output-dir /tmp/atk/o1
run --data-file $D --modes turbo --output-dir /tmp/atk/o1
run --data-file $D --modes , --output-dir /tmp/atk/o1
run --data-file $D --runner hapi --output-dir /tmp/atk/o1
run --data-file $D --model qwen --output-dir /tmp/atk/o1
run --data-file $D --epochs abc --output-dir /tmp/atk/o1
run --data-file $D --output-dir afile --modes fixed
run --data-file data/gbk.csv --output-dir /tmp/atk/o1
run --data-file data/one_row.csv --output-dir /tmp/atk/o1
run --data-file $D --lr inf --output-dir /tmp/atk/o1 --modes fixed --max-train-samples 50 --max-len 24 --epochs 1
run --data-file $D --seed 4294967296 --output-dir /tmp/atk/o1 --modes fixed --max-train-samples 50 --max-len 24 --epochs 1
