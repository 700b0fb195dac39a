/// A loop's ``LoopReport`` as its engine keeps it: the four counts nearly every loop moves (events sent
/// and processed, effects started and completed) inline, the rest in a report allocated the first time
/// one of them moves (a rejection, a failure, a cancellation, the ending); setting one to the value it
/// has allocates nothing.
///
/// A whole report inline was 120 bytes of each loop's engine, most of them zeros for the life of most
/// loops; this is 40 (w3's bytes per loop, `Docs/Performance.md`). The names are the report's, so the
/// engine counts as it always did. A value: a copy's rarer counts are copied when either side changes
/// them.
@usableFromInline
struct LoopCounts {
    /// The rarer counts and the ending, once one of them moved.
    @usableFromInline
    final class Rare {
        @usableFromInline
        var report: LoopReport

        @usableFromInline
        init(_ report: LoopReport) {
            self.report = report
        }
    }

    @usableFromInline
    var eventsSent = 0
    @usableFromInline
    var eventsProcessed = 0
    @usableFromInline
    var effectsStarted = 0
    @usableFromInline
    var effectsCompleted = 0
    @usableFromInline
    var rare: Rare?

    @inlinable
    init() {}

    /// The report these counts make.
    @inlinable
    var report: LoopReport {
        var report = rare?.report ?? LoopReport()
        report.eventsSent = eventsSent
        report.eventsProcessed = eventsProcessed
        report.effectsStarted = effectsStarted
        report.effectsCompleted = effectsCompleted
        return report
    }

    /// Changes the rarer counts, allocating them (or a copy another value still shares) first if needed.
    @inlinable
    mutating func changeRare(_ change: (inout LoopReport) -> Void) {
        if !isKnownUniquelyReferenced(&rare) { rare = Rare(rare?.report ?? LoopReport()) }
        guard let rare else { return }
        change(&rare.report)
    }

    @inlinable
    var eventsRejected: Int {
        get { rare?.report.eventsRejected ?? 0 }
        set { if newValue != eventsRejected { changeRare { $0.eventsRejected = newValue } } }
    }

    @inlinable
    var eventsDropped: Int {
        get { rare?.report.eventsDropped ?? 0 }
        set { if newValue != eventsDropped { changeRare { $0.eventsDropped = newValue } } }
    }

    @inlinable
    var effectsFailed: Int {
        get { rare?.report.effectsFailed ?? 0 }
        set { if newValue != effectsFailed { changeRare { $0.effectsFailed = newValue } } }
    }

    @inlinable
    var effectsCancelled: Int {
        get { rare?.report.effectsCancelled ?? 0 }
        set { if newValue != effectsCancelled { changeRare { $0.effectsCancelled = newValue } } }
    }

    @inlinable
    var effectsCancelledAfterStart: Int {
        get { rare?.report.effectsCancelledAfterStart ?? 0 }
        set { if newValue != effectsCancelledAfterStart { changeRare { $0.effectsCancelledAfterStart = newValue } } }
    }

    @inlinable
    var effectsTimedOut: Int {
        get { rare?.report.effectsTimedOut ?? 0 }
        set { if newValue != effectsTimedOut { changeRare { $0.effectsTimedOut = newValue } } }
    }

    @inlinable
    var effectsDropped: Int {
        get { rare?.report.effectsDropped ?? 0 }
        set { if newValue != effectsDropped { changeRare { $0.effectsDropped = newValue } } }
    }

    @inlinable
    var effectsAbandoned: Int {
        get { rare?.report.effectsAbandoned ?? 0 }
        set { if newValue != effectsAbandoned { changeRare { $0.effectsAbandoned = newValue } } }
    }

    @inlinable
    var timedOutStillRunning: Int {
        get { rare?.report.timedOutStillRunning ?? 0 }
        set { if newValue != timedOutStillRunning { changeRare { $0.timedOutStillRunning = newValue } } }
    }

    @inlinable
    var ending: LoopReport.Ending? {
        get { rare?.report.ending }
        set { if newValue != ending { changeRare { $0.ending = newValue } } }
    }
}
