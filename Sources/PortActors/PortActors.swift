@_exported import Distributed
@_exported import NamedPortServer

// PortActors: `distributed actor`s over PortKit's ports. `PortActorSystem` is the actor
// system; a program that imports this module has the names, ports and permanent threads
// below it too.
