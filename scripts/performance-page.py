#!/usr/bin/env python3
"""Writes docs/PERFORMANCE.md from the benchmark's JSON lines (portkit-bench --json).

    scripts/performance-page.py [--check] [RESULTS.jsonl] [OUTPUT.md]

With --check, writes nothing and fails if OUTPUT.md is not what the results make (CI).
Defaults: Benchmarks/results/portkit-bench.jsonl and docs/PERFORMANCE.md; the charts go
beside the page: performance-ratios.svg, and for each case whose rows carry a "size" (the
scale.* cases, whose impls are sizes of one thing) performance-CASE.svg, its cost against
its size. A file
RESULTS.stderr.txt beside the results, if present, lists the cases a baseline could not
be measured in. Standard library only.
"""
import html
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each case measures, and what "better" means for its unit.
CASES = {
    "loop.wake": "a block performed on a sleeping loop, until it runs (loop and caller on two CPUs)",
    "loop.wake-same-cpu": "the same, loop and caller pinned to one CPU",
    "loop.timer-1ms": "how late a 1 ms timer fires, median of a chain of 200",
    "execute.roundtrip": "a block posted to an idle thread, until it signals back",
    "execute.roundtrip-b2b": "the same, each block posted as soon as the last one signalled back",
    "execute.throughput-1p": "blocks executed per second, one producer",
    "execute.throughput-4p": "blocks executed per second, four producers",
    "execute.sync": "a value round trip with `sync` (Dispatch runs it inline on the caller: not like for like)",
    "execute.sync-same-cpu": "`execute.sync` with every thread of the process on one CPU: the code's cost, "
                             "free of the machine's wake-up latency",
    "thread.idle-rss": "resident memory of 100 idle threads",
    "thread.idle-cpu": "CPU time of 100 idle threads over one second",
    "port.inprocess.roundtrip": "a request to an idle receiver on another thread and its reply, "
                                "every thread of the process on one CPU",
    "port.inprocess.roundtrip-b2b": "the same, each request as soon as the last reply is in",
    "port.inprocess.roundtrip-apart": "a request to an idle receiver and its reply, the caller on one CPU "
                                      "and every other thread on the other",
    "port.inprocess.throughput": "one-way messages per second between two threads",
    "port.process.roundtrip": "a 64-byte request and its reply to a child process",
    "port.process.oneway": "64-byte one-way messages per second to a child process",
    "port.process.bulk": "64 KiB messages to a child process",
    "port.tcp.roundtrip": "a 64-byte request and its reply to a port listening on 127.0.0.1 (`raw`: the same "
                          "bytes echoed on a connected TCP socket)",
    "port.tls.roundtrip": "the same over TLS with certificates both ways (`raw`: a TLS echo on a connected socket)",
    "names.lookup": "a name looked up on a kept connection, with a connection brokered to its owner",
    "names.call": "a request to a named owner and its reply, once the name is looked up",
    "names.owner": "who holds a name, one request through the server (`raw`: one bare request/response)",
    "names.register": "a name registered and released: two requests, the first carrying a port "
                      "(`raw`: one bare request/response; `raw-registered`: the kernel work of any such pair, "
                      "a socket pair made, one end sent with the first request and watched by the server, "
                      "closed by it on the second)",
    "names.connect-lookup": "connect to the server, say hello, look a name up (the lookup goes out behind "
                            "the hello; `raw`: connect to a listening Unix socket and one request/response; "
                            "`raw-brokered`: connect and one brokered lookup, as `names.lookup`'s)",
    "names.lookup-same-cpu": "`names.lookup` with every thread of the process on one CPU: the code's cost "
                             "against the floor, free of the machine's wake-up latency",
    "names.owner-same-cpu": "`names.owner` with every thread of the process on one CPU",
    "names.register-same-cpu": "`names.register` with every thread of the process on one CPU",
    "names.connect-lookup-same-cpu": "`names.connect-lookup` with every thread of the process on one CPU",
    "names.death": "SIGKILL of an owner until a watcher sees its name vanish",
    "names.death-floor": "the kernel alone: SIGKILL until the survivor's end of a socket hangs up, for three victims",
    "cluster.lookup": "a port to a name held on another node (`raw`: one etcd range request for the "
                      "name's key on a kept HTTP connection, which hands back a record, not a port)",
    "cluster.call": "a 64-byte request to the owner of a name on another node and its reply, over TLS "
                    "through that node's gateway",
    "cluster.call-same-cpu": "`cluster.call` with every thread of the process on one CPU (both nodes, the "
                             "gateway and the owner are in the bench process): the code's cost against the floors",
    "cluster.death": "SIGKILL of an owner on one node until a watcher on another sees its name vanish "
                     "(`raw`: an etcd delete until an etcd watch reports it)",
    "scale.ports": "a message to a random one of N ports on one sleeping loop, caller and loop on one CPU",
    "scale.timers": "the mean cost of arming and firing a timer on a loop that holds N other timers",
    "scale.threads-rss": "resident memory per idle permanent thread, N of them asleep",
    "scale.threads-cpu": "CPU time of N idle permanent threads over one second",
    "scale.names": "a lookup of a random one of N names, registered for one port by another process, on a kept "
                   "connection",
    "scale.names-same-cpu": "`scale.names` with every thread of this process on one CPU and the owner's process "
                            "on the other",
    "scale.clients": "lookups per second through one server from N clients at once, each its own "
                     "connection and task",
    "scale.clients-latency": "the time of each of those lookups, with N of them in flight",
    "scale.idle-connections": "how much a name server's resident memory grows per idle client connection: "
                              "(resident set with 1,000 clients connected, each answered once − resident set "
                              "before) / 1,000, for a `portnamed` process the bench starts afresh for each run",
    "scale.idle-connections-rounds": "a fresh name server's resident memory before any client (size 0) and after "
                                     "each of three rounds of 1,000 clients connecting, idling and leaving (size: "
                                     "the clients come and gone so far); flat is the goal",
}

BASELINES = {
    "raw": "the same exchange written directly against system calls (epoll and eventfd for a loop, "
           "a Unix socket pair for ports, a bare request and response for names)",
    "raw-brokered": "`raw` plus the kernel work any brokered lookup needs: a fresh `socketpair`, "
                    "one end passed with SCM_RIGHTS, both closed",
    "raw-creds": "`raw` with SO_PASSCRED set on both ends of the socket pair, as on every PortKit socket: "
                 "what passing the sender's credentials with each message costs",
    "raw-registered": "`raw` plus the kernel work any registration of a port needs: a fresh `socketpair` "
                      "whose end goes with the request (SCM_RIGHTS) into the server's epoll set, taken out "
                      "and closed by the release",
    "raw-relayed": "`raw` through one relay thread (a death told on, or a call passed on over a Unix "
                   "socket pair): what any server in between adds at least",
    "portkit-connect": "PortKit connecting to a name across nodes itself (`ClusterNode.connect(toName:)`): "
                       "a new TCP connection with its TLS handshake and one request",
    "pthread": "a pthread with a mutex and condition-variable queue of closures",
    "dispatch": "a serial `DispatchQueue` (`async`, `sync`, `DispatchSourceTimer`; async plus a semaphore for ports)",
    "foundation": "Foundation on Linux: a `Thread` running its `RunLoop` (given blocks with `RunLoop.perform` "
                  "plus `CFRunLoopWakeUp`), or `SocketPort` over TCP for processes",
    "dbus": "D-Bus, what a Linux program would otherwise use for names: a private `dbus-daemon` and "
            "libdbus clients (`Benchmarks/dbus/portkit-dbus-peer.c`): `GetNameOwner` for a lookup, which "
            "hands back a string; a method call through the bus for a call; `NameOwnerChanged` for a death",
    "dbus-broker": "`dbus-broker`, Debian's D-Bus broker, started privately for the run (`dbus-broker-launch` "
                   "handed a listening socket, in a private mount namespace) with raw D-Bus clients that said "
                   "`Hello`; its resident memory is the broker process's",
    "portkit-spin": "PortKit's own permanent thread made with `spinBeforeSleep` (it keeps its CPU "
                    "for a short window before it sleeps)",
    "fresh-sleep": "`/bin/sleep` killed as soon as it is spawned",
    "settled-sleep": "`/bin/sleep` killed once asleep",
    "settled-swift": "a Swift program with Foundation and PortKit loaded, killed once asleep",
}


def rate(unit):
    return unit.endswith("/s")


def fmt(value):
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e4:
        return f"{value / 1e3:.0f} k"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def advantage(portkit, baseline, unit):
    """How many times better PortKit does than the baseline: above 1 is better."""
    return portkit / baseline if rate(unit) else baseline / portkit


def chart_svg(cases):
    """A horizontal bar per case and baseline, on a log scale centred on 1x."""
    bars = []
    for name, impls in cases.items():
        portkit = next((r for r in impls if r["impl"] == "portkit"), None)
        if portkit is None:
            continue
        for r in impls:
            if r is not portkit and r["median"] > 0 and portkit["median"] > 0:
                bars.append((f"{name} / {r['impl']}", advantage(portkit["median"], r["median"], r["unit"])))
    low, high = math.log10(1 / 64), math.log10(64)
    label_width, plot_width, row, top = 290, 420, 16, 34
    height = top + row * len(bars) + 30
    width = label_width + plot_width + 60

    def x(value):
        clamped = min(max(math.log10(value), low), high)
        return label_width + (clamped - low) / (high - low) * plot_width

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{label_width}" y="14">How many times better PortKit does than each baseline '
           f'(log scale; right of 1x is better)</text>']
    for tick in (1 / 64, 1 / 8, 1, 8, 64):
        tx = x(tick)
        text = f"{tick:g}x" if tick >= 1 else f"1/{1 / tick:g}x"
        out.append(f'<line x1="{tx:.1f}" y1="{top - 6}" x2="{tx:.1f}" y2="{height - 24}" '
                   f'stroke="{"#444" if tick == 1 else "#ddd"}"/>')
        out.append(f'<text x="{tx:.1f}" y="{height - 10}" text-anchor="middle">{text}</text>')
    for index, (label, value) in enumerate(bars):
        y = top + index * row
        x0, x1 = sorted((x(1), x(value)))
        colour = "#2e7d32" if value >= 1 else "#c62828"
        out.append(f'<text x="{label_width - 6}" y="{y + 11}" text-anchor="end">{html.escape(label)}</text>')
        out.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 1):.1f}" height="{row - 5}" fill="{colour}"/>')
        out.append(f'<text x="{max(x(value), x(1)) + 4:.1f}" y="{y + 11}">{value:.2f}x</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def sized(impls):
    """Whether a case's rows carry sizes: its impls are sizes of one thing, not rivals."""
    return any("size" in r for r in impls)


def series_of(row):
    """The curve a sized row belongs to: its impl without the size (`ports-10` -> `ports`)."""
    impl = row["impl"]
    suffix = f"-{row['size']}"
    return impl[: -len(suffix)] if impl.endswith(suffix) else impl


def count_label(value):
    for divisor, suffix in ((1_000_000, "M"), (1000, "k")):
        if value >= divisor and value % divisor == 0:
            return f"{value // divisor}{suffix}"
    return f"{value:g}"


def curve_svg(name, impls):
    """Median against size, one curve per series: sizes on a log scale, cost from zero, so a
    flat curve reads as flat; a bar through each point spans the runs' range."""
    rows = sorted((r for r in impls if "size" in r), key=lambda r: r["size"])
    series = {}
    for r in rows:
        series.setdefault(series_of(r), []).append(r)
    unit = rows[0]["unit"]
    left, right, top, bottom, plot_width, plot_height = 64, 130, 30, 40, 400, 200
    width, height = left + plot_width + right, top + plot_height + bottom
    sizes = sorted({r["size"] for r in rows})
    # A size of 0 (a "before" row) has no logarithm: such a curve gets a linear axis.
    scale = math.log10 if sizes[0] > 0 else (lambda size: size)
    low, high = scale(sizes[0]), scale(sizes[-1])
    ceiling = max(r["max"] for r in rows) * 1.1 or 1

    def x(size):
        if high == low:
            return left + plot_width / 2
        inset = 20
        return left + inset + (scale(size) - low) / (high - low) * (plot_width - 2 * inset)

    def y(value):
        return top + plot_height - value / ceiling * plot_height

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="16">{html.escape(name)}: median {html.escape(unit)} against size '
           f'(bars: range of the runs)</text>']
    for step in range(5):
        value = ceiling * step / 4
        out.append(f'<line x1="{left}" y1="{y(value):.1f}" x2="{left + plot_width}" y2="{y(value):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{fmt(value) if value else "0"}</text>')
    for size in sizes:
        out.append(f'<line x1="{x(size):.1f}" y1="{top}" x2="{x(size):.1f}" y2="{top + plot_height}" stroke="#eee"/>')
        out.append(f'<text x="{x(size):.1f}" y="{top + plot_height + 16}" text-anchor="middle">{count_label(size)}</text>')
    axis = "size (log scale)" if sizes[0] > 0 else "size"
    out.append(f'<text x="{left + plot_width / 2}" y="{height - 6}" text-anchor="middle">{axis}</text>')
    colours = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00"]
    for index, (label, points) in enumerate(series.items()):
        colour = colours[index % len(colours)]
        path = " ".join(f"{x(r['size']):.1f},{y(r['median']):.1f}" for r in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for r in points:
            px = x(r["size"])
            out.append(f'<line x1="{px:.1f}" y1="{y(r["min"]):.1f}" x2="{px:.1f}" y2="{y(r["max"]):.1f}" stroke="{colour}"/>')
            out.append(f'<circle cx="{px:.1f}" cy="{y(r["median"]):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<text x="{left + plot_width + 10}" y="{top + 12 + index * 16}" fill="{colour}">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    arguments = sys.argv[1:]
    check = "--check" in arguments
    arguments = [a for a in arguments if a != "--check"]
    results = arguments[0] if len(arguments) > 0 else os.path.join(ROOT, "Benchmarks/results/portkit-bench.jsonl")
    output = arguments[1] if len(arguments) > 1 else os.path.join(ROOT, "docs/PERFORMANCE.md")
    rows = [json.loads(line) for line in open(results) if line.strip()]
    cases = {}
    for row in rows:
        cases.setdefault(row["bench"], []).append(row)
    notes = []
    stderr = os.path.splitext(results)[0] + ".stderr.txt"
    if os.path.exists(stderr):
        notes = [line.strip().removeprefix("portkit-bench: ") for line in open(stderr) if "not measurable" in line]
    runs = sorted({row["runs"] for row in rows})
    relative = os.path.relpath(results, ROOT)

    out = []
    w = out.append
    w("# Performance")
    w("")
    w(f"<!-- Generated by scripts/performance-page.py from {relative}; do not edit by hand. -->")
    w("")
    w("How PortKit compares with what a Linux program would otherwise use: Dispatch, Foundation,")
    w("a pthread with a condition variable, D-Bus for names, and the same exchanges written directly")
    w("against system calls. Every figure below comes from one `portkit-bench --json` run, committed as")
    w(f"`{relative}`.")
    w("")
    w("## Method")
    w("")
    w("```sh")
    w("scripts/bench-setup.sh    # dbus-daemon, dbus-broker, libdbus, etcd and the bench's D-Bus peer")
    w("scripts/install.sh --prefix /tmp/portkit    # the installed daemon the scale.idle cases start")
    w("swift build -c release --product portkit-bench-service    # the service names.activation starts")
    w("swift build -c release --product portkit-bench")
    w("PORTKIT_PORTNAMED=/tmp/portkit/bin/portnamed \\")
    w("    .build/release/portkit-bench --json > Benchmarks/results/portkit-bench.jsonl \\")
    w("    2> Benchmarks/results/portkit-bench.stderr.txt")
    w("scripts/performance-page.py")
    w("```")
    w("")
    w("- Each case runs PortKit and its baselines in the same process, alternating run by run,")
    w(f"  after one warm-up run each; {', '.join(map(str, runs))} measured runs per implementation.")
    w("  A sample is one run's result; the tables give the median of the samples and their")
    w("  range (min – max). A run of timed exchanges (a round trip, a lookup) samples their")
    w("  median, and its **p99** column is the median over the runs of each run's 99th percentile.")
    w("- The claim is the **ratio** to a baseline of the same invocation, never an absolute")
    w("  figure: the reference machine is a small shared virtual machine (2 vCPUs), where")
    w("  absolute figures move by up to 2x between invocations while ratios hold.")
    w("- Except where a thread wakes another on a second CPU: waking a halted vCPU of this machine")
    w("  costs about 5 µs or about 50 µs, which of the two changing from one invocation to the next")
    w("  and hitting PortKit and a baseline at different moments, so such a ratio can flip (the")
    w("  range column shows it). A case named `…-same-cpu` runs the same work with every thread of")
    w("  the process on one CPU, handing over by context switches: its ratio is what the code")
    w("  costs, and it holds from one invocation to the next.")
    w("- The ratio is PortKit's median divided by the baseline's. For a time (µs, ms, KiB)")
    w("  below 1 means PortKit took less; for a rate (a unit ending in /s) above 1 means")
    w("  PortKit did more.")
    w("- `--filter SUBSTRING` runs one family (`loop`, `execute`, `thread.idle`, `port.`, `names`, `scale.`);")
    w("  `--runs N` changes the number of runs.")
    w("- The `dbus` impls start a private bus of their own for the case (never the system or")
    w("  session bus). Without `dbus-daemon` or the peer, the bench leaves them out and says why;")
    w("  the `dbus-broker` impls likewise without `dbus-broker`.")
    w("")
    w("The baselines:")
    w("")
    seen = sorted({row["impl"] for row in rows if row["impl"] != "portkit" and "size" not in row})
    for impl in seen:
        w(f"- `{impl}`: {BASELINES.get(impl, 'see the case')}.")
    w("")
    w("## At a glance")
    w("")
    w("| case | unit | PortKit | ratio to each baseline |")
    w("| --- | --- | ---: | --- |")
    for name, impls in cases.items():
        portkit = next((r for r in impls if r["impl"] == "portkit"), None)
        if portkit is None or sized(impls):
            continue
        ratios = [f"{r['impl']} {portkit['median'] / r['median']:.2f}x" for r in impls
                  if r["impl"] != "portkit" and r["median"] > 0]
        w(f"| `{name}` | {portkit['unit']} | {fmt(portkit['median'])} | {', '.join(ratios) or '—'} |")
    w("")
    w("![How many times better PortKit does than each baseline](performance-ratios.svg)")
    w("")
    w("The chart turns each ratio into PortKit's advantage, so right of 1x is better for every")
    w("unit: a baseline's time divided by PortKit's, or PortKit's rate divided by the baseline's.")
    w("")

    families = [("The run loop and the permanent thread", ("loop.", "execute.", "thread.")),
                ("Ports", ("port.",)), ("Named ports", ("names.",)), ("Named ports across hosts", ("cluster.",)),
                ("The name server's memory", ("scale.idle-",))]
    for title, prefixes in families:
        # The sized cases (impls that are sizes of one thing) have a section of their own below.
        members = [(name, impls) for name, impls in cases.items() if name.startswith(prefixes) and not sized(impls)]
        if not members:
            continue
        w(f"## {title}")
        w("")
        for name, impls in members:
            unit = impls[0]["unit"]
            better = "higher is better" if rate(unit) else "lower is better"
            w(f"### `{name}`")
            w("")
            what = CASES.get(name, name)
            w(f"{what[:1].upper() + what[1:]} ({unit}, {better}).")
            w("")
            portkit = next((r for r in impls if r["impl"] == "portkit"), None)
            tail = any("p99" in r for r in impls)
            w("| implementation | median | range |" + (" p99 |" if tail else "") + " PortKit ÷ it |")
            w("| --- | ---: | ---: |" + (" ---: |" if tail else "") + " ---: |")
            for r in impls:
                ratio = ""
                if portkit is not None and r is not portkit and r["median"] > 0:
                    ratio = f"{portkit['median'] / r['median']:.2f}x"
                p99 = f" {fmt(r['p99'])} |" if "p99" in r else (" |" if tail else "")
                w(f"| {r['impl']} | {fmt(r['median'])} | {fmt(r['min'])} – {fmt(r['max'])} |{p99} {ratio} |")
            for note in notes:
                if note.startswith(name + "/"):
                    w("")
                    w(f"Not measured: `{note.split(':')[0]}` — {note.split(':', 2)[-1].strip()}.")
            w("")

    charts = {}
    scaled = [(name, impls) for name, impls in cases.items() if sized(impls)]
    if scaled:
        w("## How cost grows")
        w("")
        w("Each of these cases measures one thing at several sizes (ports on a loop, timers, threads,")
        w("names, clients, idle clients come and gone);")
        w("its rows carry the size, and the ratio is each size's median to the smallest size's of the")
        w("same invocation.")
        w("")
    for name, impls in scaled:
        unit = impls[0]["unit"]
        chart = f"performance-{name}.svg"
        charts[chart] = curve_svg(name, impls)
        w(f"### `{name}`")
        w("")
        what = CASES.get(name, name)
        better = "higher is better" if rate(unit) else "lower is better"
        w(f"{what[:1].upper() + what[1:]} ({unit}, {better}).")
        w("")
        w(f"![{name}: cost against size]({chart})")
        w("")
        tail = any("p99" in r for r in impls)
        w("| series | size | median | range |" + (" p99 |" if tail else "") + " ÷ smallest |")
        w("| --- | ---: | ---: | ---: |" + (" ---: |" if tail else "") + " ---: |")
        by_series = {}
        for r in sorted(impls, key=lambda r: r.get("size", 0)):
            by_series.setdefault(series_of(r), []).append(r)
        for label, points in by_series.items():
            base = points[0]["median"]
            for r in points:
                ratio = f"{r['median'] / base:.2f}x" if base > 0 and r is not points[0] else ""
                p99 = f" {fmt(r['p99'])} |" if "p99" in r else (" |" if tail else "")
                w(f"| {label} | {count_label(r.get('size', 0))} | {fmt(r['median'])} | "
                  f"{fmt(r['min'])} – {fmt(r['max'])} |{p99} {ratio} |")
        w("")

    w("## Reading the figures")
    w("")
    w("- A block posted to an idle thread costs a wake-up: a futex while the loop watches no")
    w("  descriptor, its epoll set's eventfd otherwise. The inbox is lock-free, so producers")
    w("  never wait for one another.")
    w("- Between processes, the ratio to `raw` is what PortKit's framing, its run loop on the")
    w("  receiving side and its typed errors cost over the bare system calls.")
    w("- A lookup brokers a fresh socket pair; `raw-brokered` is the kernel's share of that")
    w("  alone, the floor any brokered lookup stands on. A death is seen when the kernel closes")
    w("  the dead process's descriptors, after tearing down its memory: `names.death-floor`")
    w("  shows that floor grows with the victim's size, and a real program's death is seen")
    w("  after a millisecond or more, nearly all of it the kernel's. docs/NAMES.md says more.")
    w("- D-Bus answers a lookup with a string, the owner's unique name, and every call to the owner")
    w("  then goes through the bus daemon: two hops and two parses each way. A PortKit lookup hands")
    w("  back a port connected to the owner, and a call on it goes straight there.")
    w("- Two threads of a process hand a request over with a context switch when they share a")
    w("  CPU; on two CPUs of a virtual machine each wake-up of an idle CPU costs tens of µs more.")
    w("  Left to the scheduler, that choice flipped from one invocation to the next, so the")
    w("  in-process round trips pin every thread of the process, Dispatch's workers too.")
    w("")
    page = "\n".join(out)
    files = {output: page, os.path.join(os.path.dirname(output), "performance-ratios.svg"): chart_svg(cases)}
    for chart, svg in charts.items():
        files[os.path.join(os.path.dirname(output), chart)] = svg
    if check:
        for path, text in files.items():
            current = open(path).read() if os.path.exists(path) else ""
            if current != text:
                sys.exit(f"performance-page: {os.path.relpath(path, ROOT)} is not what {relative} makes; "
                         "run scripts/performance-page.py")
        print(f"performance-page: {os.path.relpath(output, ROOT)} is up to date")
        return
    for path, text in files.items():
        with open(path, "w") as f:
            f.write(text)
    print(f"performance-page: wrote {os.path.relpath(output, ROOT)} ({len(cases)} cases, {len(charts)} curves)")


if __name__ == "__main__":
    main()
