import CPortKitSystem
import Glibc
import PortKitLocks

/// What the fault seam makes a wrapped system call do instead of its usual work.
package enum InjectedFault: Sendable, Hashable {
    /// The call is not made; it fails with this error (`EINTR`, `EAGAIN`, `EPIPE`,
    /// `ECONNRESET`, `EMFILE`, …). An injected `EINTR` goes through the `EINTR` policy like
    /// a real one: the call is made again.
    case failure(Errno)
    /// The call is made, moving at most this many bytes (a short write; at least 1 makes
    /// progress, 0 makes a write of nothing).
    case shortWrite(Int)
    /// A `recvmsg` is made, and the descriptors it brought are closed and reported lost
    /// (`MSG_CTRUNC`), as the kernel does when the receiver's descriptor table is full.
    /// Other calls are made as usual.
    case descriptorsDropped
}

/// A test-only seam in the System layer: makes chosen wrapped system calls fail, or write
/// short, so that tests can prove how the layers above handle faults the kernel seldom
/// gives on demand.
///
/// Cost when unused: every wrapped call reads one relaxed atomic counter of armed rules
/// (`systemCall`), and nothing else.
///
/// Scope: a rule hits only the calls of one thread (`Scope.thread`, by default the thread
/// that arms it) or only the calls on one descriptor (`Scope.descriptor`), so tests that
/// run in parallel in the same process are not hit by each other's faults. A rule for
/// another thread (a port's loop thread, say) is armed with the scope that thread's
/// `FaultSeam.currentThread` returned there. Every rule is disarmed by its test, which
/// reads how many times it fired.
package enum FaultSeam {
    /// Which calls a rule may hit.
    package enum Scope: Sendable, Hashable {
        /// The calls made on this thread (a `pthread_self()` value).
        case thread(UInt)
        /// The calls on this descriptor (a socket pair's, an accept's or a waitpid's have
        /// none: use `thread`).
        case descriptor(CInt)
    }

    /// An armed rule, to disarm.
    package struct Rule: Sendable, Hashable {
        fileprivate let id: Int
    }

    private struct Armed {
        let id: Int
        let call: SystemCall
        let fault: InjectedFault
        let scope: Scope
        /// Matching calls still to let through before the first fault.
        var skipping: Int
        /// Faults still to inject.
        var remaining: Int
        /// Faults injected so far.
        var fired = 0
    }

    private struct Rules {
        var nextID = 1
        var armed: [Armed] = []
    }

    private static let rules = Locked(Rules())

    /// The scope of the calling thread's calls.
    package static var currentThread: Scope { .thread(UInt(pthread_self())) }

    /// Arms `fault` for the next `times` calls of `call` in `scope`, after letting the
    /// first `skipping` of them through.
    package static func arm(
        _ fault: InjectedFault, on call: SystemCall, times: Int = 1, skipping: Int = 0, scope: Scope = currentThread
    ) -> Rule {
        rules.withLock { rules in
            let id = rules.nextID
            rules.nextID += 1
            rules.armed.append(Armed(id: id, call: call, fault: fault, scope: scope, skipping: skipping, remaining: times))
            portkit_fault_seam_set_armed(CInt(rules.armed.count))
            return Rule(id: id)
        }
    }

    /// How many times `rule` has injected its fault so far.
    package static func fired(_ rule: Rule) -> Int {
        rules.withLock { rules in rules.armed.first { $0.id == rule.id }?.fired ?? 0 }
    }

    /// Disarms `rule`; returns how many times it injected its fault.
    @discardableResult
    package static func disarm(_ rule: Rule) -> Int {
        rules.withLock { rules in
            guard let index = rules.armed.firstIndex(where: { $0.id == rule.id }) else { return 0 }
            let fired = rules.armed.remove(at: index).fired
            portkit_fault_seam_set_armed(CInt(rules.armed.count))
            return fired
        }
    }

    /// Runs `body` with `fault` armed for the calling thread's calls of `call`, then
    /// disarms it; returns `body`'s value and how many times the fault was injected.
    package static func injecting<R, E: Error>(
        _ fault: InjectedFault, on call: SystemCall, times: Int = 1, skipping: Int = 0, _ body: () throws(E) -> R
    ) throws(E) -> (value: R, fired: Int) {
        let rule = arm(fault, on: call, times: times, skipping: skipping)
        let value: R
        do { value = try body() } catch {
            disarm(rule)
            throw error
        }
        return (value, disarm(rule))
    }

    /// The fault to inject into this call of `call` on `descriptor`, if an armed rule
    /// matches it (and counts it). Called by `systemCall` only when a rule is armed.
    package static func take(_ call: SystemCall, descriptor: CInt) -> InjectedFault? {
        let thread = UInt(pthread_self())
        return rules.withLock { rules -> InjectedFault? in
            for index in rules.armed.indices {
                let rule = rules.armed[index]
                guard rule.call == call, rule.remaining > 0 else { continue }
                switch rule.scope {
                case .thread(let id): guard id == thread else { continue }
                case .descriptor(let fd): guard fd == descriptor else { continue }
                }
                if rule.skipping > 0 {
                    rules.armed[index].skipping -= 1
                    return nil
                }
                rules.armed[index].remaining -= 1
                rules.armed[index].fired += 1
                return rule.fault
            }
            return nil
        }
    }
}
