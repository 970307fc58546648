import re,sys
# for each C2 task compiling PollJit lambda$main$0, the inline decision for SymmetricRingBuffer.poll / pollContiguous
for f in sys.argv[1:]:
    txt=open(f).read()
    for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
        t=m.group(0)
        head=t[:t.index('>')]
        if "lambda$main$0" not in head or "level='4'" in head and False: pass
        if "PollJit lambda$main$0" not in head: continue
        if "level=" in head and "level='4'" not in head and "compiler='c2'" not in head:
            pass
        methods={}
        for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t):
            methods[mm.group(1)]=mm.group(3)
        res=[]
        for cm in re.finditer(r"<call method='(\d+)'[^>]*/>\s*(?:<[^>]*/>\s*)*?<inline_(fail|success) reason='([^']+)'", t):
            name=methods.get(cm.group(1))
            if name in ('poll','pollContiguous'):
                res.append(f"{name}: {cm.group(2)} ({cm.group(3)})")
        cid=re.search(r"compile_id='(\d+)'",head).group(1)
        osr='osr' if 'osr_bci' in head else ''
        print(f, cid, osr, re.search(r"level='(\d)'",head).group(1) if "level=" in head else 'c2?', '; '.join(res))
