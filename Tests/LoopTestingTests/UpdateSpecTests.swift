import LoopCore
import LoopTesting
import Testing

@Suite struct UpdateSpecTests {
    typealias State = Jobs.State
    let spec = Jobs.spec

    @Test func aMatchingSpecPasses() {
        let result = spec.given(State())
            .when(.submit("a"), .start("a"))
            .then(
                state: State(jobs: [Jobs.Job(name: "a", status: .running(attempt: 1))]),
                effects: [.log("queued a"), .run("a"), .log("started a")]
            )
        #expect(result.passed)
        #expect(result.differences == [])
    }

    @Test func aMismatchingSpecFailsTheTestAndNamesTheDifferingField() {
        let result = expectSpecFailure {
            spec.given(State())
                .when(.submit("a"), .start("a"))
                .then(.state(State(jobs: [Jobs.Job(name: "a", status: .running(attempt: 2))])))
        }
        #expect(
            result?.differences == [
                Difference(path: "state.jobs[0].status.running.attempt", expected: "2", actual: "1")
            ]
        )
    }

    @Test func theFailureReportShowsTheCaseAndEveryDifference() {
        let result = expectSpecFailure {
            spec.given(State()).when(.pause).then(state: State(paused: false), effects: [.log("paused")])
        }
        #expect(
            result?.description == """
                given State(jobs: [], limits: [:], tags: Set([]), paused: false), when [.pause]: 3 differences
                  state.paused: expected false, actual true
                  effects.count: expected 1, actual 0
                  effects[0]: expected .log("paused"), actual nothing
                """
        )
    }

    @Test func noEffectsFailsWhenThereAreEffects() {
        spec.given(State()).when(.pause).then(.noEffects)
        let result = expectSpecFailure { spec.given(State()).when(.submit("a")).then(.noEffects) }
        #expect(
            result?.differences == [Difference(path: "effects", expected: "no effects", actual: #"[.log("queued a")]"#)]
        )
    }

    @Test func effectsInAnyOrderIgnoresOrderButNotMultiplicity() {
        let when = spec.given(State()).when(.submit("a"), .start("a"))
        when.then(.effectsInAnyOrder([.log("started a"), .run("a"), .log("queued a")]))
        let result = expectSpecFailure { when.then(.effectsInAnyOrder([.run("a"), .run("a"), .log("queued a")])) }
        #expect(
            result?.differences == [
                Difference(path: "effects (any order)", expected: #".run("a")"#, actual: "nothing"),
                Difference(path: "effects (any order)", expected: "nothing", actual: #".log("started a")"#),
            ]
        )
    }

    @Test func containsEffectsAllowsOthers() {
        let when = spec.given(State()).when(.submit("a"), .start("a"))
        when.then(.containsEffects([.run("a")]))
        let result = expectSpecFailure { when.then(.containsEffects([.run("b")])) }
        #expect(
            result?.differences == [Difference(path: "effects (contains)", expected: #".run("b")"#, actual: "nothing")]
        )
    }

    @Test func predicatesAreDescribedInTheReport() {
        let when = spec.given(State()).when(.submit("a"), .submit("b"))
        when.then(
            .state("two jobs queued") { $0.jobs.count == 2 },
            .effects("only logs") { $0.allSatisfy { if case .log = $0 { true } else { false } } }
        )
        let result = expectSpecFailure { when.then(.state("paused") { $0.paused }) }
        #expect(result?.differences.map(\.expected) == ["paused"])
    }

    @Test func thenSeesTheEffectsOfEveryEventInOrder() {
        let outcome = spec.given(State()).when([.submit("a"), .submit("b")]).outcome
        #expect(outcome.effects == [.log("queued a"), .log("queued b")])
    }

    @Test func firstSpecChecksTheStart() {
        let first = First<State, Jobs.Effect>(state: State(paused: true), effects: [.log("boot")])
        FirstSpec(first).then(.state(State(paused: true)), .effects([.log("boot")]))
        let result = expectSpecFailure { FirstSpec(first).then(.state(State(paused: false)), .noEffects) }
        #expect(
            result?.differences == [
                Difference(path: "state.paused", expected: "false", actual: "true"),
                Difference(path: "effects", expected: "no effects", actual: #"[.log("boot")]"#),
            ]
        )
    }
}
