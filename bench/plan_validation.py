#!/usr/bin/env python3
# For each point measured by bench/plan_validation.sh: a calibration from
# the profiles taken right before and after it (their mean; BRACKET=0: the
# one before) and the link's bench comm, then hpctrain plan's prediction for
# that shape; prints a markdown table of predicted against measured, with a
# last column that gives the model the run's own measured compute (what the
# sync model alone predicts). SHARED=N: --shared-cores N for the profile-based
# prediction (2 for namespace hosts on a quiet 2-core machine; 0 when other
# load dominates and each process gets its share regardless).
import json, subprocess, sys, os
B = os.environ.get('PLAN_BIN', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'build', 'tools', 'hpctrain', 'hpctrain'))
OUT = sys.argv[1] if len(sys.argv) > 1 else '/tmp/hpct-plan-validation'
def lines(path):
    out = []
    for l in open(path):
        if l.startswith('{'):
            try: out.append(json.loads(l))
            except ValueError: pass
    return out
rows = []
for rate in ['10gbit', '1gbit']:
    for model in ['mlp', 'cnn']:
        for cfg in ['1x1', '1x2', '2x1', '3x1', '2x2', '3x2']:
            t = f'{OUT}/train.{rate}.{model}.{cfg}'
            prof = f'{OUT}/profile.{rate}.{model}.{cfg}.json'
            if not os.path.exists(t) or not os.path.exists(prof): continue
            meas = [j for j in lines(t) if j.get('bench') == 'train']
            if not meas: rows.append((rate, model, cfg, None, None, None, 'failed')); continue
            m = meas[0]
            cal = f'{OUT}/cal.{rate}.{model}.{cfg}.json'
            after = f'{OUT}/profile-after.{rate}.{model}.{cfg}.json'
            if os.path.exists(after) and os.environ.get('BRACKET', '1') == '1':
                # The mean of the profiles taken right before and right after the run.
                a, b = json.load(open(prof)), json.load(open(after))
                for k in ['data_s', 'forward_s', 'backward_s', 'optimizer_s']:
                    a['profile'][k] = (a['profile'][k] + b['profile'][k]) / 2
                for ga, gb in zip(a['profile']['gradients'], b['profile']['gradients']):
                    ga['ready_s'] = (ga['ready_s'] + gb['ready_s']) / 2
                prof = f'{OUT}/profile-mean.{rate}.{model}.{cfg}.json'
                json.dump(a, open(prof, 'w'))
            subprocess.run([B, 'plan', 'calibrate', '--profile', prof, '--comm', f'{OUT}/comm.{rate}.2x1',
                            '--comm', f'{OUT}/comm.{rate}.1x2', '--shared-cores', os.environ.get('SHARED', '0'), '--cores', '2', '--save', cal],
                           check=True, stdout=subprocess.DEVNULL)
            h, l = cfg.split('x')
            path = 'hier' if l != '1' else 'flat'
            p = subprocess.run([B, 'plan', '--calibration', cal, '--hosts', h, '--ranks-per-host', l, '--paths', path,
                                '--compression', 'none', '--json'], check=True, capture_output=True, text=True).stdout
            pred = [json.loads(x) for x in p.splitlines() if '"prediction"' in x][0]
            ratio = pred['samples_per_s'] / m['samples_per_s']
            # The sync model alone: the same calibration with the run's own
            # measured compute, optimizer and data times (slowest rank's split).
            c = json.load(open(cal))
            sp = m['split_ms_slowest']
            f = sp['compute'] / 1e3 / (c['profile']['forward_s'] + c['profile']['backward_s'])
            c['profile']['forward_s'] *= f
            c['profile']['backward_s'] *= f
            for g in c['profile']['gradients']: g['ready_s'] *= f
            c['profile']['optimizer_s'] = sp['optimizer'] / 1e3
            c['profile']['data_s'] = sp['data'] / 1e3
            c['host']['shared_cores'] = 0  # the measured compute already holds the sharing
            cal2 = cal.replace('/cal.', '/cal-measured-compute.')
            json.dump(c, open(cal2, 'w'))
            p2 = subprocess.run([B, 'plan', '--calibration', cal2, '--hosts', h, '--ranks-per-host', l, '--paths', path,
                                 '--compression', 'none', '--json'], check=True, capture_output=True, text=True).stdout
            pred2 = [json.loads(x) for x in p2.splitlines() if '"prediction"' in x][0]
            pred['sync_only_ratio'] = pred2['samples_per_s'] / m['samples_per_s']
            pred['sync_only_exposed_ms'] = pred2['exposed_sync_ms']
            rows.append((rate, model, cfg, pred, m, ratio, ''))
print('| link | model | hosts x ranks | path (algorithm) | predicted samples/s | measured | predicted / measured | predicted step ms: compute + exposed sync | measured step ms: compute + optimizer + sync (slowest rank) | with the run\'s own compute: predicted / measured (exposed sync ms) |')
print('|---|---|---|---|---|---|---|---|---|---|')
for rate, model, cfg, pred, m, ratio, note in rows:
    if pred is None:
        print(f'| {rate} | {model} | {cfg} | | | {note} | | | |'); continue
    sp = m['split_ms_slowest']
    split = f"{sp['compute']:.0f} + {sp['optimizer']:.0f} + {sp['sync']:.0f}"
    mark = '' if abs(ratio - 1) <= 0.15 else ' **miss**'
    r2 = pred['sync_only_ratio']
    mark2 = '' if abs(r2 - 1) <= 0.15 else ' **miss**'
    print(f"| {rate if cfg[0] != '1' else 'none (1 host)'} | {model} | {cfg} | {pred['path']} ({pred['algorithm']}) | {pred['samples_per_s']:.0f} | {m['samples_per_s']:.0f} | {ratio:.2f}{mark} | {pred['compute_ms']:.0f} + {pred['exposed_sync_ms']:.0f} | {split} | {r2:.2f}{mark2} ({pred['sync_only_exposed_ms']:.0f}) |")
