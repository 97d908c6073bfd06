# bash completion for syncopate-cli. Preset names and config keys are asked of syncopate-cli
# itself, so they are always those of the installed version.

_syncopate_cli()
{
    local cur prev words cword
    # "=" stays in the word: --set completes KEY= as one word.
    _init_completion -n = || return
    local cli=${words[0]}

    if ((cword == 1)); then
        COMPREPLY=($(compgen -W 'run presets validate keys devices info export import --help' -- "$cur"))
        return
    fi

    case $prev in
    --preset)
        # `presets` prints each name flush left, its explanation indented.
        COMPREPLY=($(compgen -W "$("$cli" presets 2>/dev/null | sed -n 's/^\([^ (][^ ]*\)$/\1/p')" -- "$cur"))
        return
        ;;
    --set)
        if [[ $cur != *=* ]]; then
            COMPREPLY=($(compgen -S = -W "$("$cli" keys 2>/dev/null | cut -d ' ' -f 1)" -- "$cur"))
            compopt -o nospace
        fi
        return
        ;;
    --config)
        _filedir json
        return
        ;;
    --out)
        _filedir -d
        return
        ;;
    --window)
        return
        ;;
    esac

    case ${words[1]} in
    run)
        COMPREPLY=($(compgen -W '--preset --config --set --out --images --window' -- "$cur"))
        ;;
    import)
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W '--out --images --window --align-clocks' -- "$cur"))
        else
            _filedir
        fi
        ;;
    validate)
        _filedir json
        ;;
    info)
        _filedir -d
        ;;
    export)
        # The run folder, then the trace file to write.
        if ((cword == 2)); then
            _filedir -d
        else
            _filedir json
        fi
        ;;
    esac
} &&
    complete -F _syncopate_cli syncopate-cli
