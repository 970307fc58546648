import re,sys
# C2 (level 4) nmethod sizes of the ring's producer methods, and the inline decisions for them in the driver's C2 compiles
f=sys.argv[1]; txt=open(f).read()
for m in re.finditer(r"<nmethod ([^>]*)/>", txt):
    a=m.group(1)
    if "level='4'" not in a and "compiler='c2'" not in a: continue
    meth=re.search(r"method='([^']*)'",a).group(1)
    if 'SymmetricRingBuffer' in meth or 'OfferJit' in meth:
        osr=' osr' if 'compile_kind=\'osr\'' in a else ''
        print('nmethod', re.search(r"compile_id='(\d+)'",a).group(1)+osr, meth, 'insts_bytes', int(re.search(r"stub_offset='(\d+)'",a).group(1))-int(re.search(r"insts_offset='(\d+)'",a).group(1)))
for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
    t=m.group(0); head=t[:t.index('>')]
    if 'OfferJit' not in head: continue
    if "level='" in head and "level='4'" not in head: continue
    methods={}
    for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t):
        methods[mm.group(1)]=mm.group(3)
    res=[]
    for cm in re.finditer(r"<call method='(\d+)'[^>]*/>\s*(?:<[^>]*/>\s*)*?<inline_(fail|success) reason='([^']+)'", t):
        name=methods.get(cm.group(1))
        if name in ('offer','poll','reserve','claimManyToOne','copyPayload','copyShort'):
            res.append(f"{name}: {cm.group(2)} ({cm.group(3)})")
    print('task', re.search(r"compile_id='(\d+)'",head).group(1), 'osr' if 'osr_bci' in head else '', re.search(r"method='([^']*)'",head).group(1), '; '.join(res))
