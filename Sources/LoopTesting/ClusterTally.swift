internal import LoopCore
package import LoopPersistence

/// The entities of the cluster runs (the benchmark's `cluster-node` processes, and the tests that run
/// nodes or check what those processes did): each adds up the amounts it is sent. One definition, so a
/// test's pure replay is the program the nodes ran.
package enum ClusterTally {
    /// An amount to add.
    package enum Event: Codable, Sendable, Equatable {
        case add(Int)
    }

    /// Starts at 0; adds each amount.
    package static let program = DurableProgram<Int, Event, Never>(
        initial: 0,
        update: Update { total, event in
            switch event {
            case .add(let amount): total += amount
            }
            return []
        }
    )

    /// Event `index` of producer `producer`: its entity and its amount, the same in every process.
    package static func event(_ index: Int, producer: Int, entities: Int) -> (entity: Int, amount: Int) {
        ((index &* 7_919 &+ producer &* 104_729) % entities, index % 10 + 1)
    }
}
