"""From a -XX:+LogCompilation file: C2 nmethod sizes of the ring's methods and, for each C2 compile of the driver and of
offer itself, every inline decision for the ring's entry points and every call left (inline_fail) inside offer's tree."""
import re, sys
txt = open(sys.argv[1]).read(); driver = sys.argv[2] if len(sys.argv) > 2 else 'RttJit'
for m in re.finditer(r"<nmethod ([^>]*)/>", txt):
    a = m.group(1)
    if "compiler='c2'" not in a: continue
    meth = re.search(r"method='([^']*)'", a).group(1)
    if 'SymmetricRingBuffer' in meth or driver in meth:
        ins = int(re.search(r"stub_offset='(\d+)'", a).group(1)) - int(re.search(r"insts_offset='(\d+)'", a).group(1))
        print('nmethod', re.search(r"compile_id='(\d+)'", a).group(1), ' osr' if 'osr' in a else '', meth, 'insts_bytes', ins)
ENTRY = ('offer', 'offerOutOfLine', 'poll', 'copy', 'copyPayloadAt', 'reserve', 'claimOneToOne', 'claimManyToOne')
for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
    t = m.group(0); head = t[:t.index('>')]
    if "level='" in head and "level='4'" not in head: continue
    meth = re.search(r"method='([^']*)'", head).group(1)
    if driver not in meth and 'SymmetricRingBuffer offer ' not in meth: continue
    methods = {mm.group(1): (mm.group(3), mm.group(2)) for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t)}
    klass = {mm.group(1): mm.group(2) for mm in re.finditer(r"<klass id='(\d+)' name='([^']+)'", t)}
    out = []; stack = []
    for ev in re.finditer(r"<(parse|/parse|call|inline_fail|inline_success)( [^>]*)?/?>", t):
        kind, attrs = ev.group(1), ev.group(2) or ''
        if kind == 'parse':
            stack.append(methods.get(re.search(r"method='(\d+)'", attrs).group(1), ('?', ''))[0])
        elif kind == '/parse':
            stack.pop()
        elif kind == 'call':
            cur = methods.get(re.search(r"method='(\d+)'", attrs).group(1), ('?', ''))
        elif kind in ('inline_fail', 'inline_success'):
            reason = re.search(r"reason='([^']*)'", attrs).group(1)
            inside_offer = 'offer' in stack
            if cur[0] in ENTRY or (inside_offer and kind == 'inline_fail'):
                out.append(f"{'/'.join(stack[-1:])}->{klass.get(cur[1], '')}.{cur[0]}: {kind[7:]} ({reason})")
    print('task', re.search(r"compile_id='(\d+)'", head).group(1), 'osr' if 'osr_bci' in head else '', meth.split(' ')[1] if ' ' in meth else meth)
    for o in out: print('    ', o)
