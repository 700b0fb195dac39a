import Foundation
import LoopDemo
import Testing

/// Every input in the committed fuzz corpora (the seeds, and any input that once crashed a target)
/// runs through the fuzz targets' entry points here, so a crash that was fixed stays fixed.
@Suite struct FuzzRegressionTests {
    static let root = String(#filePath.prefix(upTo: #filePath.range(of: "/Tests/")?.lowerBound ?? #filePath.endIndex))

    @Test func theCommandCorpusParsesWithoutCrashing() {
        let files = FuzzCorpus.files(at: Self.root + "/Tests/Fuzz/commands")
        #expect(files.count >= 9)
        for file in files { FuzzEntry.command(FuzzCorpus.read(file)) }
    }

    @Test func theJournalCorpusReadsAndReplaysWithoutCrashing() {
        let files = FuzzCorpus.files(at: Self.root + "/Tests/Fuzz/journal")
        #expect(files.count >= 3)
        for file in files { FuzzEntry.journal(FuzzCorpus.read(file)) }
    }
}
