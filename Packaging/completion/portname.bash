# bash completion for portname and portnamed (PortKit).
#   install -Dm644 portname.bash /usr/share/bash-completion/completions/portname
#   ln -s portname /usr/share/bash-completion/completions/portnamed
# Names are completed from `portname list` at the address on the command line, if any.

_portname_names() {
    local address=() i
    for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
        [[ ${COMP_WORDS[i]} == --address ]] && address=(--address "${COMP_WORDS[i + 1]}")
    done
    portname "${address[@]}" list 2>/dev/null | cut -f1
}

_portname() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    local verbs="list lookup watch status serve send call monitor help" verb="" i
    if [[ $prev == --address ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        --address) ((i++)) ;;
        list | lookup | watch | status | serve | send | call | monitor | help) verb=${COMP_WORDS[i]}; break ;;
        esac
    done
    case $verb in
    "") COMPREPLY=($(compgen -W "$verbs --address --help --version" -- "$cur")) ;;
    help) COMPREPLY=($(compgen -W "$verbs" -- "$cur")) ;;
    list)
        case $prev in
        --cluster) return ;;
        --tls-cert | --tls-key | --tls-ca) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        esac
        COMPREPLY=($(compgen -W "--activatable --cluster --tls-cert --tls-key --tls-ca --json --help" -- "$cur")) ;;
    status) COMPREPLY=($(compgen -W "--json --help $(_portname_names)" -- "$cur")) ;;
    lookup)
        [[ $prev == --wait ]] && return
        COMPREPLY=($(compgen -W "--wait --json --help $(_portname_names)" -- "$cur")) ;;
    watch) COMPREPLY=($(compgen -W "--json --help $(_portname_names)" -- "$cur")) ;;
    serve) COMPREPLY=($(compgen -W "--echo --cluster --queue --replace --replaceable --json --help" -- "$cur")) ;;
    send)
        [[ $prev == --id || $prev == --timeout ]] && return
        COMPREPLY=($(compgen -W "--id --timeout --json --help $(_portname_names)" -- "$cur")) ;;
    call)
        case $prev in
        --id | --timeout | --text) return ;;
        --bytes | --fd) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        esac
        COMPREPLY=($(compgen -W "--id --text --bytes --fd --oneway --timeout --json --help $(_portname_names)" -- "$cur")) ;;
    monitor) COMPREPLY=($(compgen -W "--json --help $(_portname_names)" -- "$cur")) ;;
    esac
}

_portnamed() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    case $prev in
    --address | --tls-cert | --tls-key | --tls-ca) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --service-dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --log-level) COMPREPLY=($(compgen -W "warning notice info debug" -- "$cur")); return ;;
    --socket-mode | --allow-uid | --max-* | --etcd | --node | --lease-ttl | --listen) return ;;
    esac
    COMPREPLY=($(compgen -W "--address --socket-mode --allow-uid --allow-any-user --max-connections
        --max-names --max-watches --max-waiting-lookups --max-queued-bytes --service-dir --log-level --etcd --node --lease-ttl --listen --tls-cert --tls-key --tls-ca
        --help --version" -- "$cur"))
}

complete -F _portname portname
complete -F _portnamed portnamed
