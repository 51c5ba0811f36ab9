/// Every benchmark family, in the order they run. A new family is one file with a type
/// conforming to `BenchmarkFamily`, added to `families`.
enum BenchmarkRegistry {
    static var families: [any BenchmarkFamily.Type] {
        [
            LoopBenchmarks.self,
            ExecuteBenchmarks.self,
            PortBenchmarks.self,
            TCPBenchmarks.self,
            TLSBenchmarks.self,
            NameBenchmarks.self,
            NameActivationBenchmarks.self,
            ScaleBenchmarks.self,
            ClusterBenchmarks.self,
            ActorBenchmarks.self,
        ]
    }

    /// Every case, sized for `scale`.
    static func cases(_ scale: BenchmarkScale) -> [BenchmarkCase] {
        families.flatMap { $0.cases(scale) }
    }
}
