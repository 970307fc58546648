import re,sys
# C2 nmethod sizes of the ring methods, and each C2 compile of the driver's code: the inline decisions for the ring's methods.
f=sys.argv[1]; driver=sys.argv[2] if len(sys.argv)>2 else 'RttJit'
txt=open(f).read()
HOLD=('SymmetricRingBuffer','RingBufferLayout','OneToOneRingBuffer','ManyToOneRingBuffer', driver)
for m in re.finditer(r"<nmethod ([^>]*)/>", txt):
    a=m.group(1)
    if "level='4'" not in a and "compiler='c2'" not in a: continue
    meth=re.search(r"method='([^']*)'",a).group(1)
    if any(h in meth for h in HOLD):
        osr=' osr' if "compile_kind='osr'" in a else ''
        print('nmethod', re.search(r"compile_id='(\d+)'",a).group(1)+osr, meth, 'insts_bytes', int(re.search(r"stub_offset='(\d+)'",a).group(1))-int(re.search(r"insts_offset='(\d+)'",a).group(1)))
NAMES=('offer','poll','reserve','claimOneToOne','claimManyToOne','claimOneToOneSlow','copyPayload','free','write','read','claimCapacity','putBytes','copy','onMessage','isAlive','freeManyToOne','zeroData')
for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
    t=m.group(0); head=t[:t.index('>')]
    if driver not in head: continue
    if "level='" in head and "level='4'" not in head: continue
    methods={}
    for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t):
        methods[mm.group(1)]=mm.group(3)
    res=[]
    for cm in re.finditer(r"<call method='(\d+)'[^>]*/>\s*(?:<[^>]*/>\s*)*?<inline_(fail|success) reason='([^']+)'", t):
        name=methods.get(cm.group(1))
        if name in NAMES:
            res.append(f"{name}: {cm.group(2)} ({cm.group(3)})")
    print('task', re.search(r"compile_id='(\d+)'",head).group(1), 'osr' if 'osr_bci' in head else '', re.search(r"method='([^']*)'",head).group(1), '; '.join(res))
