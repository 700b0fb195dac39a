import LoopPersistence
import LoopSupport

#if canImport(Glibc)
import Glibc
#endif

extension Workloads {
    /// w16: a file store of `w16Events` events in `w16Streams` streams, closed, then opened until its
    /// first append is accepted: from the index checkpoint the close wrote, and with the whole log read
    /// (``FileEventStore/Options/indexCheckpoint`` off), in turn, in the same run. The log's pages are
    /// in the page cache (the store was just written): the time is the store's work, not the disk's.
    static func w16(_ sizes: Sizes) async throws -> Outcome {
        let (streams, events) = (sizes.w16Streams, sizes.w16Events)
        let perStream = events / streams
        let directory = scratchStore("w16")
        defer { removeTree(directory) }
        let payload = PackedCodec<Tally.Event>().encode(.add(1))
        var versions = [UInt64](repeating: UInt64(perStream), count: streams)
        do {
            let store = try FileEventStore(directory: directory)
            try await fill(store, streams: streams, each: Array(repeating: payload, count: perStream)) {
                "stream-\($0)"
            }
            await store.close()
        }
        var fromCheckpoint: [Double] = []
        var whole: [Double] = []
        var ok = true
        for run in 0..<sizes.runs {
            for useCheckpoint in [true, false] {
                let index = (run * 2 + (useCheckpoint ? 0 : 1)) * 7_919 % streams
                let stream = "stream-\(index)"
                let start = ContinuousClock.now
                let store = try FileEventStore(directory: directory, options: .init(indexCheckpoint: useCheckpoint))
                let expected = versions[index]
                versions[index] += 1
                let version = try await store.append([payload], to: stream, expecting: expected)
                let elapsed = ContinuousClock.now - start
                let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                let opening = store.opening
                await store.close()
                ok =
                    ok && version == expected + 1 && opening.events >= UInt64(events)
                    && opening.streams == streams
                if useCheckpoint {
                    if case .used = opening.checkpoint {} else { ok = false }
                    fromCheckpoint.append(seconds)
                } else {
                    ok = ok && opening.checkpoint == .none
                    whole.append(seconds)
                }
            }
        }
        let open = Measure.median(fromCheckpoint)
        return Outcome(
            workload: "w16",
            title: "open a file store of \(events) events in \(streams) streams to its first append; "
                + "raw: the same with the whole log read",
            perSecond: Double(events) / open,
            rawPerSecond: Double(events) / Measure.median(whole),
            runs: sizes.runs,
            // The bar: 2 s from the checkpoint.
            ok: ok && open <= 2,
            extra: [
                ("open_s", open), ("open_s_min", fromCheckpoint.min() ?? 0), ("open_s_max", fromCheckpoint.max() ?? 0),
                ("open_full_s", Measure.median(whole)), ("open_full_s_min", whole.min() ?? 0),
                ("open_full_s_max", whole.max() ?? 0),
            ],
            rates: fromCheckpoint.map { Double(events) / $0 }
        )
    }
}
