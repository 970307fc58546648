#!/usr/bin/env python3
"""inline-tree.py LOGFILE [names...]: for every C2 task in a -XX:+LogCompilation file, the inline decisions for calls to the
named methods (default: the ring's copy path), with their depth and the chain of callers."""
import re, sys
txt = open(sys.argv[1], errors='replace').read()
names = sys.argv[2:] or ['copyMemory0', 'copyMemory', 'offer', 'write', 'send', 'copy', 'tryClaim', 'commit', 'putBytes',
                         'onMessage', 'accept', 'poll', 'read', 'lambda$serve$0']
for m in re.finditer(r"<task (?:(?!</task>).)*?</task>", txt, re.S):
    t = m.group(0); head = t[:t.index('>')]
    if "level='" in head and "level='4'" not in head: continue
    meth = re.search(r"method='([^']*)'", head).group(1)
    if 'symmem4j' not in meth and 'agrona' not in meth: continue
    cid = re.search(r"compile_id='(\d+)'", head).group(1); osr = re.search(r"osr_bci='(\d+)'", head)
    stamp = re.search(r"stamp='([^']+)'", head).group(1)
    methods = {mm.group(1): (mm.group(3), mm.group(2)) for mm in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']+)'", t)}
    klass = {mm.group(1): mm.group(2).split('/')[-1] for mm in re.finditer(r"<klass id='(\d+)' name='([^']+)'", t)}
    def nm(i):
        n, h = methods.get(i, ('?', '')); return klass.get(h, '?') + '::' + n
    print(f'== task {cid} stamp {stamp} {meth}' + (f' osr@{osr.group(1)}' if osr else ''))
    stack = []; cur = None
    for ev in re.finditer(r"<(parse|/parse|call|inline_fail|inline_success|intrinsic)( [^>]*)?/?>", t):
        kind, attrs = ev.group(1), ev.group(2) or ''
        if kind == 'parse':
            stack.append(nm(re.search(r"method='(\d+)'", attrs).group(1)))
        elif kind == '/parse':
            stack.pop()
        elif kind == 'call':
            cur = nm(re.search(r"method='(\d+)'", attrs).group(1))
        elif cur and cur.split('::')[-1] in names:
            reason = re.search(r"reason='([^']*)'", attrs)
            what = kind + (' ' + reason.group(1) if reason else '') + (' ' + re.search(r"id='([^']*)'", attrs).group(1) if kind == 'intrinsic' else '')
            print(f'   d{len(stack)} {cur}: {what}    <- ' + ' < '.join(s.split('::')[-1] for s in reversed(stack[-6:])))
            if kind != 'intrinsic':
                cur = None  # an intrinsic follows its call's decision; anything else closes the call
