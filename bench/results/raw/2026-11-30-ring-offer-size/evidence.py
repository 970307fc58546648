import re
def ev(tag, main):
    txt = open('/tmp/offersize/m-%s-1.log' % tag).read()
    out = ['--- %s (rep 1), driver %s' % (tag, main)]
    for m in re.finditer(r"<nmethod [^>]*method='org.symmem4j.state.SymmetricRingBuffer offer [^>]*/>", txt):
        a = m.group(0)
        if "compiler='c2'" in a:
            ins = int(re.search(r"stub_offset='(\d+)'", a).group(1)) - int(re.search(r"insts_offset='(\d+)'", a).group(1))
            a = re.sub(r" (address|relocation_offset|scopes_data_offset|scopes_pcs_offset|dependencies_offset|handler_table_offset|nul_chk_table_offset|oops_offset|metadata_offset|entry)='[^']*'", '', a)
            out.append(a + '   <!-- main code = stub_offset - insts_offset = %d bytes -->' % ins)
    for t in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
        t = t.group(0); head = t[:t.index('>')]
        if "level='" in head and "level='4'" not in head: continue
        meth = re.search(r"method='([^']*)'", head).group(1)
        if main not in meth and 'SymmetricRingBuffer offer ' not in meth: continue
        cid = re.search(r"compile_id='(\d+)'", head).group(1)
        ids = {mm.group(1): mm.group(2) for mm in re.finditer(r"<method id='(\d+)' holder='\d+' name='([^']+)'", t)}
        for c in re.finditer(r"(<call method='(\d+)'[^>]*/>)\s*((?:<[^>]*/>\s*)*?)(<inline_(?:success|fail) reason='[^']*'/>)", t):
            name = ids.get(c.group(2))
            if name in ('offer', 'copy', 'copyPayloadAt', 'offerOutOfLine'):
                out.append('task %s %s: %s %s %s' % (cid, meth.split(' ')[1], name, c.group(1), c.group(4)))
    print('\n'.join(out))
for tag, main in [('before-one64', 'RttJit'), ('after-one64', 'RttJit'), ('before-mix-all', 'OfferMix'),
                  ('after-mix-all', 'OfferMix'), ('after-mix-one-native', 'OfferMix')]:
    ev(tag, main)
