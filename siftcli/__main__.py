from siftcli.cli import main

main()
