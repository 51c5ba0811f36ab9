// swift-tools-version:6.0
// PortKit: threads with run loops, ports and named ports for Linux.
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "PortKit",
    products: [
        .library(name: "PermanentThread", targets: ["PermanentThread"]),
        .library(name: "PortMessaging", targets: ["PortMessaging"]),
        .library(name: "NamedPortServer", targets: ["NamedPortServer"]),
        .library(name: "PortCluster", targets: ["PortCluster"]),
        .library(name: "PortActors", targets: ["PortActors"]),
        .executable(name: "portkit-demo", targets: ["portkit-demo"]),
        .executable(name: "port-thread-checkin", targets: ["port-thread-checkin"]),
        .executable(name: "port-child-checkin", targets: ["port-child-checkin"]),
        .executable(name: "portkit-bench", targets: ["portkit-bench"]),
        .executable(name: "portnamed", targets: ["portnamed"]),
        .executable(name: "portnamed-cluster", targets: ["portnamed-cluster"]),
        .executable(name: "portname", targets: ["portname"]),
        .executable(name: "distributed-actors", targets: ["distributed-actors"]),
    ],
    targets: [
        // The Linux headers and GNU calls the Glibc module leaves out (epoll, eventfd, gettid).
        .target(name: "CPortKitSystem"),
        // Locks and futex words: a pthread mutex, a condition lock, the words threads sleep on.
        .target(name: "PortKitLocks", dependencies: ["CPortKitSystem"], swiftSettings: strict),
        // Layer 1, System: every system call of the package, through one EINTR helper and the
        // fault seam (scripts/check-raw-calls.sh fails on a system call made anywhere else).
        // Not a product: the modules above use it, their users do not see it.
        .target(name: "PortKitSystem", dependencies: ["CPortKitSystem", "PortKitLocks"], swiftSettings: strict),
        // Layers 2–4: Poller, run loop, permanent thread.
        .target(
            name: "PermanentThread", dependencies: ["PortKitSystem", "PortKitLocks", "CPortKitSystem"], swiftSettings: strict),
        // Layer 5: messages and ports between threads and processes.
        .target(name: "PortMessaging", dependencies: ["PermanentThread", "PortKitSystem", "PortKitLocks"], swiftSettings: strict),
        // Layer 6: names for ports.
        .target(
            name: "NamedPortServer", dependencies: ["PortMessaging", "PortKitSystem", "PortKitLocks"], swiftSettings: strict),
        // Layer 7 (opt-in): names across hosts, on an etcd directory.
        .target(
            name: "PortCluster", dependencies: ["NamedPortServer", "PortKitSystem", "PortKitLocks", "COpenSSL"], swiftSettings: strict),
        // Layer 8 (opt-in): distributed actors over ports, found by name.
        .target(name: "PortActors", dependencies: ["NamedPortServer", "PortKitSystem", "PortKitLocks", "CPortKitSystem"], swiftSettings: strict),
        // OpenSSL, for the cluster layer's TLS only (PortMessaging never links it).
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),

        .executableTarget(
            name: "portkit-demo",
            dependencies: ["PermanentThread", "PortMessaging", "NamedPortServer"],
            path: "Examples/portkit-demo",
            swiftSettings: strict),
        // The thread check-in of the seeds, NSMachPort and CFMessagePort style.
        .executableTarget(
            name: "port-thread-checkin", dependencies: ["PermanentThread", "PortMessaging"],
            path: "Examples/port-thread-checkin", swiftSettings: strict),
        // A parent/child check-in over pipes.
        .executableTarget(
            name: "port-child-checkin", dependencies: ["PermanentThread", "PortMessaging"],
            path: "Examples/port-child-checkin", swiftSettings: strict),
        .executableTarget(
            name: "portkit-bench",
            dependencies: [
                "PermanentThread", "PortMessaging", "NamedPortServer", "PortCluster", "PortActors", "PortKitSystem", "PortKitLocks",
                "CPortKitSystem",
            ],
            path: "Benchmarks/portkit-bench",
            swiftSettings: strict),
        // The smallest PortKit service: what names.activation starts on demand.
        .executableTarget(
            name: "portkit-bench-service", dependencies: ["NamedPortServer"],
            path: "Benchmarks/service", swiftSettings: strict),

        // The name server daemon and its command-line client. The daemon's code is NameDaemon;
        // portnamed-cluster is the daemon with the cluster layer, which portnamed becomes when
        // given cluster options, so a daemon without a cluster never loads it (or OpenSSL).
        .target(
            name: "NameDaemon", dependencies: ["NamedPortServer", "PortKitSystem", "PortKitLocks", "CPortKitSystem"], swiftSettings: strict),
        .executableTarget(name: "portnamed", dependencies: ["NameDaemon"], swiftSettings: strict),
        .executableTarget(
            name: "portnamed-cluster", dependencies: ["NameDaemon", "PortCluster", "PortKitLocks"], swiftSettings: strict),
        .executableTarget(
            name: "portname", dependencies: ["NamedPortServer", "PortCluster", "PortKitSystem"], swiftSettings: strict),
        // A named-port server and its client, as two programs.
        .executableTarget(
            name: "named-port-server", dependencies: ["NamedPortServer"],
            path: "Examples/NamedPorts/Server", swiftSettings: strict),
        .executableTarget(
            name: "named-port-client", dependencies: ["NamedPortServer"],
            path: "Examples/NamedPorts/Client", swiftSettings: strict),
        // Two cluster nodes on one machine, sharing names through one etcd.
        .executableTarget(
            name: "cluster-two-nodes", dependencies: ["PortCluster"],
            path: "Examples/Cluster", swiftSettings: strict),
        // A distributed actor on a permanent thread in one process, called by name from another.
        .executableTarget(
            name: "distributed-actors", dependencies: ["PortActors"],
            path: "Examples/DistributedActors", swiftSettings: strict),
        // A CFMessagePort-style local port and a client of it, as two programs.
        .executableTarget(
            name: "message-port-server", dependencies: ["PortMessaging", "PortKitLocks"],
            path: "Examples/MessagePorts/Server", swiftSettings: strict),
        .executableTarget(
            name: "message-port-client", dependencies: ["PortMessaging"],
            path: "Examples/MessagePorts/Client", swiftSettings: strict),

        // Every Swift snippet of the docs, compiled (scripts/doc-snippets.py writes it): README's
        // in order as a program that a test runs, the others as functions.
        .executableTarget(
            name: "doc-snippets", dependencies: ["PermanentThread", "PortMessaging", "NamedPortServer", "PortCluster", "PortActors"],
            path: "Tests/DocSnippets", swiftSettings: strict),

        // A child-process helper the tests spawn (and kill) for cross-process and leak checks.
        .executableTarget(
            name: "portkit-test-helper",
            dependencies: [
                "PermanentThread", "PortMessaging", "NamedPortServer", "PortCluster", "PortKitSystem", "PortKitLocks",
                "PortKitTestSupport",
            ],
            path: "Tests/TestHelper",
            swiftSettings: strict),

        // The child processes of the actor tests: actor systems the tests call, kill and restart.
        .executableTarget(
            name: "portactors-test-helper", dependencies: ["PortActors", "PortActorsTestActors"],
            path: "Tests/ActorsTestHelper", swiftSettings: strict),
        // The distributed actors the actor tests and their child processes share (a target's
        // identifier names its module, so caller and callee must use the same one).
        .target(
            name: "PortActorsTestActors", dependencies: ["PortActors"], path: "Tests/ActorsTestActors",
            swiftSettings: strict),

        // What the test targets share: loop threads, waiting with deadlines, child processes.
        .target(
            name: "PortKitTestSupport", dependencies: ["PermanentThread", "PortKitSystem", "PortKitLocks"], path: "Tests/TestSupport",
            swiftSettings: strict),

        .testTarget(
            name: "PermanentThreadTests",
            dependencies: ["PermanentThread", "PortKitSystem", "PortKitLocks", "CPortKitSystem", "PortKitTestSupport", "portkit-test-helper"],
            swiftSettings: strict),
        // The System layer's and the locks' own tests, and the Poller's (which lives in PermanentThread).
        .testTarget(
            name: "SystemTests", dependencies: ["PortKitSystem", "PortKitLocks", "CPortKitSystem", "PortKitTestSupport"],
            swiftSettings: strict),
        .testTarget(name: "PollerTests", dependencies: ["PermanentThread", "PortKitSystem"], swiftSettings: strict),
        .testTarget(
            name: "PortMessagingTests",
            dependencies: [
                "PortMessaging", "PortKitSystem", "PortKitLocks", "CPortKitSystem", "PortKitTestSupport", "portkit-test-helper",
                "message-port-server", "message-port-client",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "NamedPortServerTests",
            dependencies: [
                "NamedPortServer", "PermanentThread", "PortMessaging", "PortKitSystem", "PortKitLocks", "PortKitTestSupport", "portkit-test-helper",
                "portnamed", "portname", "named-port-server", "doc-snippets",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "PortClusterTests",
            dependencies: [
                "PortCluster", "PermanentThread", "PortKitSystem", "PortKitTestSupport", "portkit-test-helper", "portnamed", "portnamed-cluster",
                "portname", "cluster-two-nodes",
            ],
            swiftSettings: strict),
        .testTarget(
            name: "PortActorsTests",
            dependencies: [
                "PortActors", "PortActorsTestActors", "PortCluster", "PortKitSystem", "PortKitLocks", "PortKitTestSupport", "portkit-test-helper",
                "portactors-test-helper", "portnamed", "portnamed-cluster",
                "distributed-actors",
            ],
            swiftSettings: strict),
    ]
)
