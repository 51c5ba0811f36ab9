# fish completion for portname and portnamed (PortKit).
#   install -Dm644 portname.fish /usr/share/fish/vendor_completions.d/portname.fish
# Names are completed from `portname list` at the address on the command line, if any.

function __portname_names
    set -l words (commandline -opc)
    set -l address
    set -l index (contains -i -- --address $words)
    and set address --address $words[(math $index + 1)]
    portname $address list 2>/dev/null | cut -f1
end

set -l verbs list lookup watch status serve send call monitor help
complete -c portname -f
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -l address -r -F -d 'the name server socket'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -l help -d 'print the usage'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -l version -d 'print the version'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a list -d 'every registered name with its owner'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a lookup -d 'the pid holding a name'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a watch -d 'the names held now, then every change'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a status -d 'the server, or a name\'s owner'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a serve -d 'register a name and answer requests'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a send -d 'send a request to a named port'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a call -d 'send bytes and descriptors to a named port'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a monitor -d 'the messages to and from names'
complete -c portname -n "not __fish_seen_subcommand_from $verbs" -a help -d 'help on a command'
complete -c portname -n "__fish_seen_subcommand_from help" -a "$verbs"
complete -c portname -n "__fish_seen_subcommand_from $verbs" -l help -d 'print the usage'
complete -c portname -n "__fish_seen_subcommand_from list lookup watch status serve send call monitor" -l json -d 'JSON Lines'
complete -c portname -n "__fish_seen_subcommand_from lookup watch status send call monitor" -a '(__portname_names)'
complete -c portname -n "__fish_seen_subcommand_from list" -l activatable -d 'the names the server\'s service files declare'
complete -c portname -n "__fish_seen_subcommand_from list" -l cluster -x -d 'the names an etcd directory holds'
complete -c portname -n "__fish_seen_subcommand_from list" -l tls-cert -r -F -d 'a certificate etcd accepts'
complete -c portname -n "__fish_seen_subcommand_from list" -l tls-key -r -F -d 'its private key'
complete -c portname -n "__fish_seen_subcommand_from list" -l tls-ca -r -F -d 'the authority of etcd\'s certificate'
complete -c portname -n "__fish_seen_subcommand_from lookup" -l wait -x -d 'wait for the name, seconds'
complete -c portname -n "__fish_seen_subcommand_from serve" -l echo -d 'reply with the request bytes'
complete -c portname -n "__fish_seen_subcommand_from serve" -l cluster -d 'publish the name to every node'
complete -c portname -n "__fish_seen_subcommand_from serve" -l queue -d 'wait as a standby while another holds the name'
complete -c portname -n "__fish_seen_subcommand_from serve" -l replace -d 'take the name from a replaceable owner'
complete -c portname -n "__fish_seen_subcommand_from serve" -l replaceable -d 'let a later serve --replace take the name'
complete -c portname -n "__fish_seen_subcommand_from send call" -l id -x -d 'message id'
complete -c portname -n "__fish_seen_subcommand_from send call" -l timeout -x -d 'seconds'
complete -c portname -n "__fish_seen_subcommand_from call" -l text -x -d 'send this text'
complete -c portname -n "__fish_seen_subcommand_from call" -l bytes -r -F -d 'send this file, - for the standard input'
complete -c portname -n "__fish_seen_subcommand_from call" -l fd -r -F -d 'open this file and send its descriptor'
complete -c portname -n "__fish_seen_subcommand_from call" -l oneway -d 'send without waiting for a reply'

complete -c portnamed -f
complete -c portnamed -l address -r -F -d 'the socket to listen at'
complete -c portnamed -l socket-mode -x -d 'socket permissions, octal'
complete -c portnamed -l allow-uid -x -d 'a user allowed besides the server\'s own'
complete -c portnamed -l allow-any-user -d 'every user who can reach the socket'
complete -c portnamed -l max-connections -x -d 'client connections at once'
complete -c portnamed -l max-names -x -d 'names per connection'
complete -c portnamed -l max-watches -x -d 'watches per connection'
complete -c portnamed -l max-waiting-lookups -x -d 'waiting lookups per connection'
complete -c portnamed -l max-queued-bytes -x -d 'unread output per client'
complete -c portnamed -l service-dir -x -a '(__fish_complete_directories)' -d 'a directory of service files'
complete -c portnamed -l log-level -x -a 'warning notice info debug' -d 'least important events logged'
complete -c portnamed -l etcd -x -d 'join the cluster whose directory is there'
complete -c portnamed -l node -x -d 'this node\'s name in the cluster'
complete -c portnamed -l lease-ttl -x -d 'how long names outlive a dead node'
complete -c portnamed -l listen -x -d 'where the node\'s gateway listens'
complete -c portnamed -l tls-cert -r -F -d 'this node\'s certificate'
complete -c portnamed -l tls-key -r -F -d 'its private key'
complete -c portnamed -l tls-ca -r -F -d 'the cluster\'s authority'
complete -c portnamed -l help -d 'print the usage'
complete -c portnamed -l version -d 'print the version'
