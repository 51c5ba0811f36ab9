// portnamed: the PortKit name server as a daemon (docs/man/portnamed.8). In cluster mode
// (`--etcd`) it becomes portnamed-cluster, the program beside it, which alone links the
// cluster layer and OpenSSL: a daemon without a cluster never loads them.
import NameDaemon

Daemon.run(Array(CommandLine.arguments.dropFirst()), startCluster: nil)
