import EffectHandlers
import LoopCore
import LoopRuntime

// w12: request and reply. Many callers each await the reply to one request at a time.

/// A counter that answers each request with its number doubled.
struct Answering: Sendable {
    var answered = 0
}

enum AskEvent: Sendable {
    case ask(Int, replyTo: ReplyTo<Int>)
}

enum AskEffect: Sendable {
    case answer(Reply<Int>)
}

@Sendable
func answering(_ state: inout Answering, _ event: AskEvent) -> [AskEffect] {
    switch event {
    case .ask(let number, let replyTo):
        state.answered += 1
        return [.answer(replyTo.reply(number * 2))]
    }
}

extension Workloads {
    /// w12: `w12Callers` tasks each send `w12Requests` requests to one loop, one after another, and check
    /// that every reply is their own; replies per second. Raw: the update called directly and its reply
    /// value returned.
    static func w12(_ sizes: Sizes) async throws -> Outcome {
        let (callers, requests) = (sizes.w12Callers, sizes.w12Requests)
        let total = callers * requests
        var rates: [Double] = []
        var raws: [Double] = []
        var ok = true
        for _ in 0..<sizes.runs {
            let loop = Loop(
                program: Program(first: First(state: Answering()), update: Update(answering)),
                effects: EffectRouter<AskEffect, AskEvent>()
                    .replies { if case .answer(let reply) = $0 { reply } else { nil } }
            )
            let matched = Locked(0)
            let seconds = try await whileRunning(loop) {
                try await Measure.seconds {
                    let count = try await withThrowingTaskGroup(of: Int.self) { group in
                        for caller in 0..<callers {
                            group.addTask {
                                var mine = 0
                                for request in 0..<requests {
                                    let number = caller * requests + request
                                    if try await loop.request({ .ask(number, replyTo: $0) }) == number * 2 { mine += 1 }
                                }
                                return mine
                            }
                        }
                        return try await group.reduce(0, +)
                    }
                    matched.withLock { $0 = count }
                }
            }
            ok = ok && matched.withLock { $0 } == total && loop.state.answered == total
            rates.append(Double(total) / seconds)
            raws.append(rawReplies(total))
        }
        return Outcome(
            workload: "w12",
            title: "\(callers) callers x \(requests) requests to one loop, each reply matched",
            perSecond: Measure.median(rates),
            rawPerSecond: Measure.median(raws),
            runs: sizes.runs,
            ok: ok,
            rates: rates
        )
    }

    /// The update called directly `count` times, each reply's value read back.
    @inline(never)
    private static func rawReplies(_ count: Int) -> Double {
        var state = Answering()
        var sum = 0
        let start = ContinuousClock.now
        for number in 0..<count {
            for case .answer(let reply) in answering(&state, .ask(number, replyTo: ReplyTo(id: UInt64(number)))) {
                sum &+= opaque(reply).value
            }
        }
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return sum == count * (count - 1) ? Double(count) / seconds : 0
    }
}

/// Hides `value` from the optimiser, so a baseline's work is not folded away.
@inline(never)
func opaque<T>(_ value: T) -> T { value }
