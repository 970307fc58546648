import re,statistics,math
T={1:12.706,2:4.303,3:3.182,4:2.776,5:2.571,6:2.447,7:2.365}
rows={}
for l in open('ab.log'):
    m=re.match(r"round (\d+) (\w+) (\d+) (\w+) min ([\d.]+) p10 ([\d.]+) median ([\d.]+)",l)
    if not m: continue
    r,k,b,v=int(m.group(1)),m.group(2),int(m.group(3)),m.group(4)
    rows[(r,k,b,v)]=(float(m.group(5)),float(m.group(6)),float(m.group(7)))
print("| kind | bytes | stat | change (inline copy) ns | control (PayloadCopy.copy) ns | change − control, % of control, 95 % t over rounds | per round |")
print("|---|---:|---|---:|---:|---:|---|")
for k,b in [("one",64),("many",4096),("many",64),("one",4096)]:
    for si,st in enumerate(("min","p10")):
        rs=sorted(set(r for (r,kk,bb,v) in rows if kk==k and bb==b and (r,k,b,'true') in rows and (r,k,b,'false') in rows))
        d=[100*(rows[(r,k,b,'true')][si]/rows[(r,k,b,'false')][si]-1) for r in rs]
        a=statistics.mean(rows[(r,k,b,'true')][si] for r in rs); c=statistics.mean(rows[(r,k,b,'false')][si] for r in rs)
        m=statistics.mean(d); hw=T[len(d)-1]*statistics.stdev(d)/math.sqrt(len(d)) if len(d)>1 else float('nan')
        print(f"| {'one-to-one' if k=='one' else 'many-to-one'} | {b} | {st} | {a:.1f} | {c:.1f} | {m:+.1f} % ({m-hw:+.1f} … {m+hw:+.1f}) | {', '.join(f'{x:+.1f}' for x in d)} |")
