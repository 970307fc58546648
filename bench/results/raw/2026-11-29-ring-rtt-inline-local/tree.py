import re,sys
# tree.py LOG METHOD-SUBSTRING: every C2 task of that method, the inline decisions for calls of the rings and the benchmark's pair
txt=open(sys.argv[1],errors='replace').read()
for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
    t=m.group(0); head=t[:t.index('>')]
    if sys.argv[2] not in head or ("level='" in head and "level='4'" not in head): continue
    klass={km.group(1):km.group(2).split('/')[-1] for km in re.finditer(r"<klass id='(\d+)' name='([^']+)'", t)}
    methods={mm.group(1):klass.get(mm.group(2),'?')+'.'+mm.group(3)+' bytes='+re.search(r"bytes='(\d+)'",mm.group(0)).group(1) for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'[^>]*>", t)}
    print(head[:160])
    for cm in re.finditer(r"<call method='(\d+)'([^>]*)/>\s*(?:<[^>]*/>\s*)*?<inline_(fail|success) reason='([^']+)'", t):
        n=methods.get(cm.group(1),'?')
        if any(k in n for k in ('Ring','Agrona','send','receive','write','read','Lambda','onMessage','accept','copy','Layout')):
            cnt=re.search(r"count='(\d+)'",cm.group(2))
            print('  ',n, cm.group(3), cm.group(4), 'count', cnt.group(1) if cnt else '?')
