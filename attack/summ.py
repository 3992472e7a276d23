import json, sys, math
for d in sys.argv[1:]:
    try:
        rows = json.load(open(f"{d}/results.json"))
    except Exception as e:
        print(d, "NO RESULTS", e); continue
    print("==", d)
    for r in rows:
        print(f"  {r['mode']:8s} {r['runner']:7s} steps={r['steps']} planned={r.get('planned_steps')} skipped={r.get('skipped_steps')} micro={r['micro_batches']} real={r['real_tokens']} pad={r['padding']:.3f} peak={r['peak_memory_mb']:.2f} maxcost={r.get('max_cost_mb')} eval={r['eval_loss']:.6f} acc={r['eval_answer_accuracy']:.3f} lr_end={r['lr_at_end']:.2e} cached={r.get('calibration_cached')} err={r.get('calibration_held_out_error')}")
