// portnamed-cluster: portnamed with the cluster layer (docs/man/portnamed.8), which
// portnamed becomes when given `--etcd`. Run directly, it is the same daemon.
import NameDaemon

Daemon.run(Array(CommandLine.arguments.dropFirst()), startCluster: ClusterLink.start)
