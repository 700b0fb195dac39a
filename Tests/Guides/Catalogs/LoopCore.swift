// The code of each module's documentation page (`Sources/<Module>/<Module>.docc/<Module>.md`), one file
// per page. Each region between `// snippet` and `// end snippet` is the page's code block, as the page
// shows it (`make lint` compares them; `swift .ci/guide-check.swift --write` copies them in). The names a
// block uses are its page's namespace's, declared around the region.

import LoopCore
import Testing

/// The LoopCore page: a counter.
enum CorePage {
    struct State: Equatable, Sendable { var count = 0 }
    enum Event: Equatable, Sendable { case increment }
    enum Effect: Equatable, Sendable {}

    enum Counter {
        static func update(_ state: inout State, _ event: Event) -> [Effect] {
            state.count += 1
            return []
        }
    }

    @Test static func aCounterIsTestedWithValues() {
        // snippet
        let program = Program(first: First(state: State()), update: Update(Counter.update))
        #expect(program.replay([.increment, .increment]).state == State(count: 2))
        // end snippet
    }
}
