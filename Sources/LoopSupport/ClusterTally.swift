package import LoopCore
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

/// Entities that add what they are asked to add and answer with their new total: the program of the
/// cluster's request tests and benchmark (w14).
package enum ClusterTotals {
    /// An amount to add, and where to send the new total.
    package enum Event: Codable, Sendable, Equatable {
        case add(Int, replyTo: ReplyTo<Int>)
    }

    /// The answer to a request.
    package enum Effect: Sendable {
        case answer(Reply<Int>)
    }

    /// Starts at 0; adds each amount and answers with the total, recorded in ``BinaryCodec``'s form.
    package static let program = DurableProgram<Int, Event, Effect>(
        initial: 0,
        update: Update { total, event in
            switch event {
            case .add(let amount, let replyTo):
                total += amount
                return [.answer(replyTo.reply(total))]
            }
        }
    )
    .replying { effect in
        switch effect {
        case .answer(let reply): reply
        }
    }
}
