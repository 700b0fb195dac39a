internal import LoopCore
internal import Synchronization

extension Loop: StateFeed {
    func subscribe() -> UInt64 {
        let id = waiterIDs.add(1, ordering: .relaxed).newValue
        engine.withLock { $0.subscribe(id) }
        return id
    }

    func nextState(for id: UInt64) async -> State? {
        typealias Ready = StatePoll<State>
        switch engine.withLock({ $0.pollState(for: id) }) {
        case .state(let state): return state
        case .finished: return nil
        case nil: break
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<State?, Never>) in
                let ready = engine.withLock { engine -> Ready? in
                    if let ready = engine.pollState(for: id) { return ready }
                    if Task.isCancelled { return .finished }
                    engine.parkSubscriber(id, continuation)
                    return nil
                }
                switch ready {
                case .state(let state): continuation.resume(returning: state)
                case .finished: continuation.resume(returning: nil)
                case nil: break
                }
            }
        } onCancel: {
            engine.withLock { $0.unsubscribe(id) }?.resume(returning: nil)
        }
    }

    func unsubscribe(_ id: UInt64) {
        engine.withLock { $0.unsubscribe(id) }?.resume(returning: nil)
    }
}
