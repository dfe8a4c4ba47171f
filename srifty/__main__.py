from srifty.cli import main

main()
