#!/usr/bin/env python3
"""fork-inlining.py DIR: per JVM LogCompilation file in DIR (jit-pidN.log), which role it had (fork / peer), and for the last C2
compile of every method whose inline tree holds a ring's send path: the decisions on that path; then the deopts
(uncommon traps) in our and Agrona's ring code after the first 3 s."""
import re, sys, glob, os
KEYS = ('Symmem::send', 'Agrona::send', 'SymmetricRingBuffer::offer', 'PayloadCopy::copy', 'OneToOneRingBuffer::write',
        'SymmetricRingBuffer::poll', 'OneToOneRingBuffer::read', 'lambda$serve$0', 'Symmem::receive', 'Agrona::receive',
        'onMessage', 'RingBenchmark::roundTrip', 'Unsafe::copyMemory', 'ManyToOneRingBuffer::write',
        'ManyToOneRingBuffer::read', 'SymmetricRingBuffer::free', 'SymmetricRingBuffer::reserve')
def tasks(txt):
    for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
        yield m.group(0)
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'jit-pid*.log')), key=lambda p: int(re.search(r'pid(\d+)', p).group(1))):
    txt = open(f, errors='replace').read()
    role = 'peer' if 'BenchPeer' in txt else 'fork' if 'RingBenchmark' in txt else None
    if not role: continue
    last = {}
    for t in tasks(txt):
        head = t[:t.index('>')]
        if "level='" in head and "level='4'" not in head: continue
        meth = re.search(r"method='([^']*)'", head).group(1)
        osr = re.search(r"osr_bci='(\d+)'", head)
        stamp = float(re.search(r"stamp='([^']+)'", head).group(1))
        methods = {mm.group(1): (mm.group(3), mm.group(2)) for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t)}
        klass = {mm.group(1): mm.group(2).split('/')[-1] for mm in re.finditer(r"<klass id='(\d+)' name='([^']+)'", t)}
        def nm(i):
            n, h = methods.get(i, ('?', '')); return klass.get(h, '?') + '::' + n
        lines = []; stack = []; cur = None
        for ev in re.finditer(r"<(parse|/parse|call|inline_fail|inline_success|intrinsic)( [^>]*)?/?>", t):
            kind, attrs = ev.group(1), ev.group(2) or ''
            if kind == 'parse': stack.append(nm(re.search(r"method='(\d+)'", attrs).group(1)))
            elif kind == '/parse': stack.pop()
            elif kind == 'call': cur = nm(re.search(r"method='(\d+)'", attrs).group(1))
            elif cur and any(cur.endswith(k) for k in KEYS):
                r = re.search(r"reason='([^']*)'", attrs)
                lines.append(f'      d{len(stack)} {cur.split("$")[-1] if "$$" not in cur else cur}: {kind.replace("inline_","")} {r.group(1) if r else ""}')
                cur = None
        if any('send' in l or 'poll' in l or 'read' in l for l in lines):
            key = meth + (f' osr@{osr.group(1)}' if osr else '')
            last[key] = (stamp, lines)
    late = []
    for m in re.finditer(r"<uncommon_trap ([^>]*)>\s*<jvms ([^>]*)>", txt):
        a, j = m.group(1), m.group(2)
        st = re.search(r"stamp='([^']+)'", a)
        if not st or float(st.group(1)) < 3.0: continue
        meth = re.search(r"method='([^']*)'", j)
        if meth and ('symmem4j' in meth.group(1) or 'agrona' in meth.group(1)):
            late.append(f"{st.group(1)} {re.search(r'reason=.([^ ]+).', a).group(1)} {meth.group(1).split(' ')[0:2]}")
    print(f'#### {os.path.basename(f)} {role}')
    for k, (s, lines) in sorted(last.items(), key=lambda kv: kv[1][0]):
        print(f'  last C2 of {k} at {s:.2f}s')
        print('\n'.join(lines))
    print('  late deopts (>3 s):', len(late))
    for line in late[:8]:
        print('   ', line)
