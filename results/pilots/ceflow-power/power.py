"""The power analysis behind ceflow_confirm's seed count (its rows' seeds_why), from the exploratory pilot
results/ceflow (seeds 0 and 1, committed at 42f6654). Run from the repository root:
`python results/pilots/ceflow-power/power.py > results/pilots/ceflow-power/output.txt`."""
import numpy as np
from iterlin.experiments import reference
from iterlin.repro import stats
res = reference.load("ceflow").results
runs = res.runs
def sel(**w): return stats.runs_where(runs, **w)
T = 500.0
n = runs.net_correct.shape[1]
R32, R4, R8, R1 = (sel(R=R, n_train=64, total_time=T) for R in (32, 4, 8, 1))
net, lin = runs.net_correct, runs.lin_correct
gap = (net[R32].mean() - lin[R1].mean())
print(f"pool {n}; pilot gap R=32 net − K=∞ lin: {100*gap:.2f} pts; margin 0.25×gap = {25*gap:.2f} pts")
comps = {}
comps["gap"] = stats.variance_components(lin[R1], net[R32])
comps["R4_vs_R32"] = stats.variance_components(net[R32], net[R4])
comps["R8_vs_R32"] = stats.variance_components(net[R32], net[R8])
# Fig 5: gains N=32->128, K=inf (R=1 lin) vs R=4 net (the pilot's n_relin)
k0, k1 = sel(R=1, n_train=32, total_time=T), sel(R=1, n_train=128, total_time=T)
f0, f1 = sel(R=4, n_train=32, total_time=T), sel(R=4, n_train=128, total_time=T)
gi = lin[k1].astype(np.int8) - lin[k0].astype(np.int8)
gr = net[f1].astype(np.int8) - net[f0].astype(np.int8)
comps["fig5_gains"] = stats.variance_components(gi, gr)
# Fig 8: R=4 at tau=T/R=125 vs tau=2000 (total 8000)
far = sel(R=4, n_train=64, total_time=8000.0)
comps["fig8"] = stats.variance_components(net[far], net[R4])
for k, c in comps.items():
    print(k, {f: (v if f == "n_images" else float(f"{v:.3g}")) for f, v in c._asdict().items()})
m = 0.25 * gap
plans = {
    "large_tau (on par, ±0.25 gap)": stats.seeds_needed(comps["R4_vs_R32"], margin=m),
    "few_updates (on par, ±0.25 gap)": stats.seeds_needed(comps["R8_vs_R32"], margin=m),
    "gap (exceeds, 2 pts)": stats.seeds_needed(comps["gap"], margin=0.02, test="exceeds"),
}
for k, key in (("fig5 (exceeds, 2 pts)", "fig5_gains"), ("fig8 (exceeds, 2 pts)", "fig8")):
    try:
        plans[k] = stats.seeds_needed(comps[key], margin=0.02, test="exceeds", max_seeds=200)
    except ValueError as e:
        plans[k] = str(e)[:200]
for k, p in plans.items():
    print(k, p)
