PY="/work/main/.venv/bin/python"; export PYTHONPATH=/work/wt-attack2/src
name=$1; shift
timeout 600 $PY ../examples/sft_causal_lm.py "$@" --output-dir /tmp/atk/$name >/tmp/atk/$name.out 2>/tmp/atk/$name.err
echo "$name rc=$?"
