import json,glob,statistics,math
T={1:12.706,2:4.303,3:3.182,4:2.776,5:2.571,6:2.447,7:2.365}
def load(f):
    d={}
    for r in json.load(open(f)):
        d[(r['params']['kind'],int(r['params']['messageBytes']))]=r['primaryMetric']['score']
    return d
rounds=sorted(set(int(f.split('-')[1].split('.')[0]) for f in glob.glob('change-*.json')))
rounds=[r for r in rounds if glob.glob(f'control-{r}.json')]
print(f"rounds: {rounds}")
print("| family | bytes | ours change ns | ours control ns | Agrona ns (change forks / control forks) | Δ vs Agrona, change | Δ vs Agrona, control | effect (points), 95 % t over rounds | per round |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for fam,ours,ag in [("one-to-one","SYMMEM_ONE_TO_ONE","AGRONA_ONE_TO_ONE"),("many-to-one","SYMMEM_MANY_TO_ONE","AGRONA_MANY_TO_ONE")]:
    for b in (64,4096):
        eff=[];oc=[];ok=[];ac=[];ak=[];dc=[];dk=[]
        for r in rounds:
            c=load(f'change-{r}.json'); k=load(f'control-{r}.json')
            d1=100*(c[(ours,b)]/c[(ag,b)]-1); d2=100*(k[(ours,b)]/k[(ag,b)]-1)
            eff.append(d1-d2); oc.append(c[(ours,b)]); ok.append(k[(ours,b)]); ac.append(c[(ag,b)]); ak.append(k[(ag,b)]); dc.append(d1); dk.append(d2)
        m=statistics.mean(eff); hw=T[len(eff)-1]*statistics.stdev(eff)/math.sqrt(len(eff))
        print(f"| {fam} | {b} | {statistics.mean(oc):.1f} | {statistics.mean(ok):.1f} | {statistics.mean(ac):.1f} / {statistics.mean(ak):.1f} | {statistics.mean(dc):+.1f} % | {statistics.mean(dk):+.1f} % | {m:+.1f} ({m-hw:+.1f} … {m+hw:+.1f}) | {', '.join(f'{e:+.1f}' for e in eff)} |")
