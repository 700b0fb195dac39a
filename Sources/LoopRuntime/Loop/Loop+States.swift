internal import LoopCore
internal import Synchronization

extension Loop: StateFeed {
    func subscribe() -> UInt64 {
        let id = identifiers.add(1, ordering: .relaxed).newValue
        storage.withLock { $0.subscribers.subscribe(id) }
        return id
    }

    func nextState(for id: UInt64) async -> State? {
        typealias Ready = StatePoll<State>
        func poll(_ engine: inout LoopEngine<State, Event, Effect>) -> Ready? {
            switch engine.subscribers.poll(id, ended: engine.isStopped) {
            case .changed: .state(engine.machine.state)
            case .finished: .finished
            case .wait: nil
            }
        }
        switch storage.withLock({ poll(&$0) }) {
        case .state(let state): return state
        case .finished: return nil
        case nil: break
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<State?, Never>) in
                let ready = storage.withLock { engine -> Ready? in
                    if let ready = poll(&engine) { return ready }
                    if Task.isCancelled { return .finished }
                    engine.subscribers.park(id, continuation)
                    return nil
                }
                switch ready {
                case .state(let state): continuation.resume(returning: state)
                case .finished: continuation.resume(returning: nil)
                case nil: break
                }
            }
        } onCancel: {
            storage.withLock { $0.subscribers.unsubscribe(id) }?.resume(returning: nil)
        }
    }

    func unsubscribe(_ id: UInt64) {
        storage.withLock { $0.subscribers.unsubscribe(id) }?.resume(returning: nil)
    }
}

/// What a state-stream consumer gets without waiting.
private enum StatePoll<State> {
    case state(State)
    case finished
}
