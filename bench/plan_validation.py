#!/usr/bin/env python3
# For each point measured by bench/plan_validation.sh: a calibration made of
# the model's profile (gradients: bytes, order, when backward makes them),
# the 1-rank job of the same bench train run (--np 1,N, in turns: data,
# compute and optimizer time of the trainer's own loop; plan calibrate
# --train) and the link's bench comm; then hpctrain plan's prediction for the
# N-rank shape, against the N-rank job's measured samples/s. A last column
# gives the model the N-rank run's own measured compute instead (what the
# sync model alone predicts). SHARED=N: --shared-cores N (2: the namespace
# hosts are one 2-core machine, so N ranks share its 2 cores; 0: each host
# has its own cores). ALL_CORES=1 (the default): plan calibrate --all-cores
# with the model's allcores.RATE.MODEL run (bench train --np 1,2 on one
# host: how much slower a rank computes with both cores busy); saved runs
# from before that run existed take the 10 Gbit/s 1x2 run instead, which
# makes the 1x2 rows their own calibration (marked "own"). ALL_CORES=0: no
# busy factor (and the only way with a binary older than --all-cores).
# PLAN_BIN: the hpctrain binary to predict with. Re-running this on a saved
# OUT re-predicts the same measurements.
import json, subprocess, sys, os, re
B = os.environ.get('PLAN_BIN', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'build', 'tools', 'hpctrain', 'hpctrain'))
OUT = sys.argv[1] if len(sys.argv) > 1 else '/tmp/hpct-plan-validation'
SHARED = os.environ.get('SHARED', '2')
ALL_CORES = os.environ.get('ALL_CORES', '1') == '1'
def all_cores_file(rate, model):
    for f in [f'{OUT}/allcores.{rate}.{model}', f'{OUT}/train.10gbit.{model}.1x2']:
        if os.path.exists(f): return f
    return None
def lines(path):
    out = []
    for l in open(path):
        if l.startswith('{'):
            try: out.append(json.loads(l))
            except ValueError: pass
    return out
loads = {}
if os.path.exists(f'{OUT}/log'):
    for l in open(f'{OUT}/log'):
        m = re.match(r'\S+ load=(\S+) \S+ \S+ train (\S+) (\S+) (\S+)', l)
        if m: loads[(m.group(2), m.group(3), m.group(4))] = m.group(1)
def predict(cal, h, l, path):
    p = subprocess.run([B, 'plan', '--calibration', cal, '--hosts', h, '--ranks-per-host', l, '--paths', path,
                        '--compression', 'none', '--json'], check=True, capture_output=True, text=True).stdout
    return [json.loads(x) for x in p.splitlines() if '"prediction"' in x][0]
rows = []
for rate in ['10gbit', '1gbit']:
    for model in ['mlp', 'cnn']:
        for cfg in ['1x2', '2x1', '2x2', '3x1', '3x2']:
            t = f'{OUT}/train.{rate}.{model}.{cfg}'
            prof = f'{OUT}/profile.{rate}.{model}.json'
            if not os.path.exists(t) or not os.path.exists(prof): continue
            h, l = cfg.split('x')
            np_ = int(h) * int(l)
            meas = [j for j in lines(t) if j.get('bench') == 'train']
            one = [j for j in meas if j.get('np') == 1]
            full = [j for j in meas if j.get('np') == np_]
            if not one or not full: rows.append((rate, model, cfg, None, None, None, None, 'failed')); continue
            m = full[0]
            cal = f'{OUT}/cal.{rate}.{model}.{cfg}.json'
            busy = all_cores_file(rate, model) if ALL_CORES else None
            extra = ['--all-cores', busy] if busy else []
            subprocess.run([B, 'plan', 'calibrate', '--profile', prof, '--train', t, '--comm', f'{OUT}/comm.{rate}.2x1',
                            '--comm', f'{OUT}/comm.{rate}.1x2', '--shared-cores', SHARED, '--cores', '2', '--save', cal] + extra,
                           check=True, stdout=subprocess.DEVNULL)
            path = 'hier' if l != '1' else 'flat'
            pred = predict(cal, h, l, path)
            ratio = pred['samples_per_s'] / m['samples_per_s']
            # The sync model alone: the same calibration with the N-rank run's
            # own measured compute, optimizer and data times (slowest rank's).
            c = json.load(open(cal))
            sp = m['split_ms_slowest']
            f = sp['compute'] / 1e3 / (c['profile']['forward_s'] + c['profile']['backward_s'])
            c['profile']['forward_s'] *= f
            c['profile']['backward_s'] *= f
            for g in c['profile']['gradients']: g['ready_s'] *= f
            c['profile']['optimizer_s'] = sp['optimizer'] / 1e3
            c['profile']['data_s'] = sp['data'] / 1e3
            c['host']['shared_cores'] = 0  # the measured compute already holds the sharing
            busy_factor = c['host'].get('busy_factor', 1.0)
            if 'busy_factor' in c['host']: c['host']['busy_factor'] = 1.0  # and the busy cores
            cal2 = cal.replace('/cal.', '/cal-measured-compute.')
            json.dump(c, open(cal2, 'w'))
            pred2 = predict(cal2, h, l, path)
            pred['sync_only_ratio'] = pred2['samples_per_s'] / m['samples_per_s']
            pred['sync_only_exposed_ms'] = pred2['exposed_sync_ms']
            own = busy is not None and busy.endswith(f'.{rate}.{model}.{cfg}')
            pred['busy'] = f"{busy_factor:.3f}" + (' (own)' if own else '') if busy else '1 (none)' 
            rows.append((rate, model, cfg, pred, m, one[0], ratio, loads.get((rate, model, cfg), '?')))
print('| link | model | hosts x ranks | path (algorithm) | load | 1 rank measured (calibration) | all-cores factor | predicted samples/s | measured | predicted / measured | predicted step ms: compute + exposed sync | measured step ms: compute + optimizer + sync (slowest rank) | with the run\'s own compute: predicted / measured |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
held = 0
for rate, model, cfg, pred, m, one, ratio, load in rows:
    if pred is None:
        print(f'| {rate} | {model} | {cfg} | | | | | | failed | | | | |'); continue
    sp = m['split_ms_slowest']
    split = f"{sp['compute']:.0f} + {sp['optimizer']:.0f} + {sp['sync']:.0f}"
    ok = abs(ratio - 1) <= 0.15
    held += ok
    mark = '' if ok else ' **miss**'
    r2 = pred['sync_only_ratio']
    mark2 = '' if abs(r2 - 1) <= 0.15 else ' **miss**'
    print(f"| {rate if cfg[0] != '1' else 'none (1 host)'} | {model} | {cfg} | {pred['path']} ({pred['algorithm']}) | {load} | {one['samples_per_s']:.0f} | {pred['busy']} | {pred['samples_per_s']:.0f} | {m['samples_per_s']:.0f} | {ratio:.2f}{mark} | {pred['compute_ms']:.0f} + {pred['exposed_sync_ms']:.0f} | {split} | {r2:.2f}{mark2} |")
print(f'\n{held} of {len(rows)} points within ±15%.')
