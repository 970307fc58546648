import re,sys
# For one JVM's LogCompilation file: C2 sizes of the rings' methods, and in every C2 task, the inline decisions for them.
f=sys.argv[1]
txt=open(f,errors='replace').read()
HOLD=('SymmetricRingBuffer','RingBufferLayout','OneToOneRingBuffer','ManyToOneRingBuffer','RingPair')
NAMES=set('offer poll reserve claimOneToOne claimManyToOne copyPayload free release recordHeaderAcquire write read claimCapacity send receive onMessage commit tryClaim'.split())
for m in re.finditer(r"<nmethod ([^>]*)/>", txt):
    a=m.group(1)
    if "level='4'" not in a and "compiler='c2'" not in a: continue
    meth=re.search(r"method='([^']*)'",a).group(1)
    if any(h in meth for h in HOLD) and any((' '+n+' ') in meth for n in NAMES):
        osr=' osr' if "compile_kind='osr'" in a else ''
        print('nmethod', re.search(r"compile_id='(\d+)'",a).group(1)+osr, meth, 'insts_bytes', int(re.search(r"stub_offset='(\d+)'",a).group(1))-int(re.search(r"insts_offset='(\d+)'",a).group(1)))
for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
    t=m.group(0); head=t[:t.index('>')]
    if "level='" in head and "level='4'" not in head: continue
    methods={}; holders={}
    klass={}
    for km in re.finditer(r"<klass id='(\d+)' name='([^']+)'", t):
        klass[km.group(1)]=km.group(2).split('/')[-1]
    for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t):
        methods[mm.group(1)]=klass.get(mm.group(2),'?')+'.'+mm.group(3)
    res=[]
    for cm in re.finditer(r"<call method='(\d+)'[^>]*/>\s*(?:<[^>]*/>\s*)*?<inline_(fail|success) reason='([^']+)'", t):
        name=methods.get(cm.group(1),'?')
        if name.split('.')[-1] in NAMES and any(h in name for h in HOLD+('Lambda',)):
            res.append(f"{name}: {cm.group(2)} ({cm.group(3)})")
    if res:
        print('task', re.search(r"compile_id='(\d+)'",head).group(1), 'osr' if 'osr_bci' in head else '', re.search(r"method='([^']*)'",head).group(1), '; '.join(res))
