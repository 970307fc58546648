import re, sys
# prints, for every C2 task compiling a HostCommunicator/ControlPlane/FlightRecorder method or the probe: size and inline tree
log = open(sys.argv[1]).read()
sizes = {}
for m in re.finditer(r"<nmethod compile_id='(\d+)' compiler='c2'[^>]*? size='(\d+)'[^>]*?insts_offset='(\d+)' stub_offset='(\d+)'[^>]*?method='([^']*)'", log):
    sizes[m.group(1)] = (int(m.group(4)) - int(m.group(3)), m.group(5))
for t in re.finditer(r"<task compile_id='(\d+)'(?: compile_kind='osr')? method='([^']*)'[^>]*>(.*?)</task>", log, re.S):
    cid, meth, body = t.groups()
    if not re.search(sys.argv[2], meth):
        continue
    if cid not in sizes:
        continue
    methods = {}
    for m in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']*)'", body):
        methods[m.group(1)] = m.group(3)
    klass = {m.group(1): m.group(2) for m in re.finditer(r"<klass id='(\d+)' name='([^']*)'", body)}
    for m in re.finditer(r"<method id='(\d+)' holder='(\d+)' name='([^']*)'", body):
        methods[m.group(1)] = klass.get(m.group(2), '?').split('/')[-1] + '.' + m.group(3)
    out = []
    depth = 0
    cur = None
    for ev in re.finditer(r"<(/?)(parse|call|inline_success|inline_fail|intrinsic)\b([^>]*)>", body):
        close, tag, attrs = ev.groups()
        if tag == 'parse':
            if close: depth -= 1
            elif not attrs.endswith('/'):
                depth += 1
        elif tag == 'call':
            cur = methods.get(re.search(r"method='(\d+)'", attrs).group(1), '?')
        elif tag == 'inline_success':
            out.append('  ' * depth + cur + ' +')
        elif tag == 'inline_fail':
            out.append('  ' * depth + cur + ' - ' + re.search(r"reason='([^']*)'", attrs).group(1))
        elif tag == 'intrinsic':
            out.append('  ' * depth + cur + ' intrinsic')
    print('== task', 'osr' if "compile_kind='osr'" in t.group(0)[:200] else '', meth.split(' (')[0], 'insts bytes', sizes[cid][0], 'inline events', len(out))
    print('\n'.join(out))
