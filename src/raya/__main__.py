from raya.cli import main

main()
