import EffectHandlers
import EventSources
import LoopCore
import LoopRuntime
import LoopTesting
import Synchronization
import Testing

@Suite struct InboxTests {
    typealias Recorded = Recorder<Jobs.Event, Jobs.Effect>

    /// Holds the loop's only processing thread inside an effect while the test fills the inbox.
    func fillWhileBusy(
        _ policy: InboxPolicy,
        sending count: Int
    ) async throws -> (deliveries: [Delivery], report: LoopReport, state: Jobs.State, recorder: Recorded) {
        let busy = BusyLoop(policy)
        var deliveries: [Delivery] = []
        let report = try await running(busy.loop) {
            await busy.hold()
            for index in 0..<count { deliveries.append(busy.loop.send(.append(index))) }
            busy.release()
        }
        return (deliveries, report, busy.loop.state, busy.recorder)
    }

    @Test func rejectNewestTurnsAwayWhatDoesNotFit() async throws {
        let (deliveries, report, state, recorder) = try await fillWhileBusy(
            .bounded(3, whenFull: .rejectNewest),
            sending: 10
        )
        #expect(deliveries == Array(repeating: .accepted, count: 3) + Array(repeating: .rejected(.inboxFull), count: 7))
        #expect(state.items == [0, 1, 2])
        #expect(report.eventsSent == 11)
        #expect(report.eventsProcessed + report.eventsRejected + report.eventsDropped == report.eventsSent)
        #expect(report.eventsRejected == 7)
        #expect(recorder.entries.count { if case .rejected(_, .inboxFull) = $0 { true } else { false } } == 7)
    }

    @Test func dropOldestKeepsTheNewest() async throws {
        let (deliveries, report, state, recorder) = try await fillWhileBusy(
            .bounded(3, whenFull: .dropOldest),
            sending: 10
        )
        #expect(deliveries == Array(repeating: .accepted, count: 10))
        #expect(state.items == [7, 8, 9])
        #expect(report.eventsDropped == 7)
        #expect(report.eventsProcessed + report.eventsRejected + report.eventsDropped == report.eventsSent)
        let dropped = recorder.entries.compactMap {
            if case .eventDropped(.append(let value)) = $0 { value } else { nil }
        }
        #expect(dropped == Array(0..<7))
    }

    @Test func suspendSenderRejectsSynchronousSendsWhenFull() async throws {
        let (deliveries, report, state, _) = try await fillWhileBusy(.bounded(2, whenFull: .suspendSender), sending: 5)
        #expect(
            deliveries == [.accepted, .accepted, .rejected(.inboxFull), .rejected(.inboxFull), .rejected(.inboxFull)]
        )
        #expect(state.items == [0, 1])
        #expect(report.eventsProcessed + report.eventsRejected + report.eventsDropped == report.eventsSent)
    }

    @Test func aWaitingSenderIsAdmittedWhenRoomFrees() async throws {
        let busy = BusyLoop(.bounded(1, whenFull: .suspendSender))
        let loop = busy.loop
        let report = try await running(loop) {
            await busy.hold()
            #expect(loop.send(.append(1)) == .accepted)
            let waiting = Task { await loop.sendWaitingForRoom(.append(2)) }
            await waitUntil { loop.report.sendersWaiting == 1 }
            busy.release()
            #expect(await waiting.value == .accepted)
            await busy.recorder.wait(for: .processed(.append(2)))
        }
        #expect(loop.state.items == [1, 2])
        #expect(report.eventsSent == 3)
        #expect(report.eventsProcessed == 3)
    }

    @Test func aWaitingSenderThatIsCancelledIsRejected() async throws {
        let busy = BusyLoop(.bounded(1, whenFull: .suspendSender))
        let loop = busy.loop
        let report = try await running(loop) {
            await busy.hold()
            loop.send(.append(1))
            let waiting = Task { await loop.sendWaitingForRoom(.append(2)) }
            await waitUntil { loop.report.sendersWaiting == 1 }
            waiting.cancel()
            #expect(await waiting.value == .rejected(.inboxFull))
            busy.release()
        }
        #expect(loop.state.items == [1])
        #expect(report.eventsProcessed + report.eventsRejected + report.eventsDropped == report.eventsSent)
    }

    @Test func aWaitingSenderTurnedAwayByTheStopIsReportedToTheObserver() async throws {
        let busy = BusyLoop(.bounded(1, whenFull: .suspendSender))
        let loop = busy.loop
        let report = try await running(loop) {
            await busy.hold()
            loop.send(.append(1))
            let waiting = Task { await loop.sendWaitingForRoom(.append(2)) }
            await waitUntil { loop.report.sendersWaiting == 1 }
            loop.stop()
            #expect(await waiting.value == .rejected(.stopping))
            busy.release()
        }
        #expect(busy.recorder.entries.contains(.rejected(.append(2), .stopping)))
        #expect(report.eventsProcessed + report.eventsRejected + report.eventsDropped == report.eventsSent)
    }
}
